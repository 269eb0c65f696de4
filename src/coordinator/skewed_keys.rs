//! Skewed join keys split across a partitioned join's tasks.
//!
//! A partitioned hash join sends each key to one partition: a key that holds a large share of
//! the probe side's rows gives one task that share of the work while the others wait (Spark's
//! adaptive execution splits such partitions). So, before the query is cut into stages, the
//! probe side of a partitioned join is sampled (its first rows, read on the workers); a key
//! is hot when it holds at least 1/`HOT_SHARE` of the sample and enough to make its partition
//! twice the average of the join's partitions. The join is then planned on its keys
//! plus a salt:
//! - a hot key's probe rows each get a random salt in `0..ways`;
//! - a hot key's build rows are sent once with every salt;
//! - all other rows get salt 0.
//!
//! Each probe row still meets every build row of its key, now in one of `ways` partitions
//! instead of all in one: the same answer, the hot key's work spread over the tasks. Only
//! join types that never emit a build row on its own are split (a hot key's build rows now
//! exist `ways` times): inner, right, right semi, right anti and right mark, the types a
//! broadcast serves too.
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::row::{OwnedRow, RowConverter, SortField};
use datafusion::common::stats::Precision;
use datafusion::common::{JoinType, Result, ScalarValue, UnnestOptions};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{binary, lit, CaseExpr, CastExpr, Column};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::unnest::{ListUnnest, UnnestExec};
use datafusion::physical_plan::ExecutionPlan;

use super::join_sides::{below_shuffle, scans_only};
use super::run_first::{run_first, Run};

/// The most probe rows read to find hot keys: two batches. Enough to see a key of an eighth
/// of them; a bigger sample costs more than it finds (100,000 rows added 6% to TPC-H SF1's
/// time, where no key is hot: a scan's tasks read ahead of what is taken).
pub const SAMPLE_ROWS: usize = 16_384;
/// A probe side estimated under this many rows is not sampled: no key of it is much work.
const MIN_PROBE_ROWS: usize = 10_000;
/// A key holding at least 1/`HOT_SHARE` of the sample may be hot (so at most this many are).
const HOT_SHARE: usize = 8;
/// ...and at least this many of its rows.
const MIN_HOT_ROWS: usize = 1_000;
/// The salt's column on each side of a split join.
const SALT: &str = "__dfdpy_salt";

/// The hot keys of a join's probe side, as its sample found them.
#[derive(Clone, Debug, PartialEq)]
pub struct Hot {
    /// Each hot key's values, one per join key, most rows first.
    pub keys: Vec<Vec<ScalarValue>>,
    /// The sampled rows the hot keys held, and all the sampled rows.
    pub rows: usize,
    pub sampled: usize,
}

impl Hot {
    /// The share of `total` (a probe side's bytes) the hot keys held in the sample.
    pub fn share_of(&self, total: usize) -> usize {
        (total as f64 * self.rows as f64 / self.sampled.max(1) as f64) as usize
    }

    /// The hot keys as the plan would write them: `7`, `(7, 'a')`.
    pub fn shown(&self) -> String {
        let one = |key: &Vec<ScalarValue>| {
            let values: Vec<String> = key.iter().map(ToString::to_string).collect();
            match values.len() {
                1 => values[0].clone(),
                _ => format!("({})", values.join(", ")),
            }
        };
        self.keys.iter().map(one).collect::<Vec<_>>().join(", ")
    }
}

/// Whether `join` could be split: partitioned, of a type that never emits a build row on its
/// own, and with a probe side that is cheap to sample (a scan, filtered or projected) and big
/// enough for a key of it to matter.
pub fn splittable(join: &HashJoinExec) -> bool {
    let types = matches!(
        join.join_type(),
        JoinType::Inner
            | JoinType::Right
            | JoinType::RightSemi
            | JoinType::RightAnti
            | JoinType::RightMark
    );
    if *join.partition_mode() != PartitionMode::Partitioned || !types || join.null_aware {
        return false;
    }
    let probe = below_shuffle(join.right());
    if !scans_only(probe) {
        return false;
    }
    let stats = StatisticsContext::new().compute(probe.as_ref(), &StatisticsArgs::new());
    match stats.map(|s| s.num_rows) {
        Ok(Precision::Exact(rows) | Precision::Inexact(rows)) => rows >= MIN_PROBE_ROWS,
        _ => true,
    }
}

/// The hot keys of `join`'s probe side, read from its first `SAMPLE_ROWS` rows on the
/// workers, when it runs in `partitions`; `None` when no key is hot.
pub async fn sample(join: &HashJoinExec, run: &Run<'_>, partitions: usize) -> Result<Option<Hot>> {
    let probe = Arc::clone(below_shuffle(join.right()));
    let keys: Vec<Arc<dyn PhysicalExpr>> = join.on().iter().map(|(_, r)| Arc::clone(r)).collect();
    let schema = probe.schema();
    let fields = keys
        .iter()
        .map(|k| Ok(SortField::new(k.data_type(&schema)?)))
        .collect::<Result<Vec<_>>>()?;
    let converter = RowConverter::new(fields)?;
    let mut counts: HashMap<OwnedRow, usize> = HashMap::new();
    let mut sampled = 0;
    let what = "a join's probe side, sampled for skewed keys";
    run_first(probe, run, what, |batch| {
        let columns = keys
            .iter()
            .map(|k| k.evaluate(&batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let rows = converter.convert_columns(&columns)?;
        let mut here: HashMap<_, usize> = HashMap::new();
        for row in rows.iter() {
            *here.entry(row).or_default() += 1;
        }
        for (row, n) in here {
            *counts.entry(row.owned()).or_default() += n;
        }
        sampled += batch.num_rows();
        Ok(sampled < SAMPLE_ROWS)
    })
    .await?;
    let threshold = (sampled / HOT_SHARE)
        .max(hot_from(sampled, partitions))
        .max(MIN_HOT_ROWS);
    let mut hot: Vec<(OwnedRow, usize)> = counts
        .into_iter()
        .filter(|(_, n)| *n >= threshold)
        .collect();
    hot.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let mut found = Hot {
        keys: Vec::new(),
        rows: 0,
        sampled,
    };
    for (row, n) in hot {
        let arrays = converter.convert_rows([row.row()])?;
        let key = arrays
            .iter()
            .map(|a| ScalarValue::try_from_array(a, 0))
            .collect::<Result<Vec<_>>>()?;
        // A null key meets nothing (or, null-equal, is one key like any): leave it be.
        if key.iter().any(ScalarValue::is_null) {
            continue;
        }
        found.keys.push(key);
        found.rows += n;
    }
    Ok((!found.keys.is_empty()).then_some(found))
}

/// The fewest of `sampled` rows a key holds for its partition to be twice the average of
/// `partitions` (it holds h of the rows: h + (1 - h) / p >= 2 / p, so h >= 1 / (p - 1)).
/// Splitting costs every row of the join a salt and a second key; a lesser key is not
/// worth it.
fn hot_from(sampled: usize, partitions: usize) -> usize {
    sampled / partitions.saturating_sub(1).max(1)
}

/// The partitions a join may run in: each worker's share of it, on every worker.
pub fn partitions(target_partitions: usize, workers: usize) -> usize {
    target_partitions.max(1) * workers.max(1)
}

/// How many ways a hot key is split: two for every partition the join may run in.
pub fn ways(partitions: usize) -> usize {
    (partitions * 2).clamp(4, 64)
}

/// `join` planned on its keys plus a salt that splits `hot` keys `ways` ways (see the
/// module's doc). Its hash repartitions are left for the plan to be settled with.
pub fn split(join: &HashJoinExec, hot: &Hot, ways: usize) -> Result<Arc<dyn ExecutionPlan>> {
    let build = Arc::clone(below_shuffle(join.left()));
    let probe = Arc::clone(below_shuffle(join.right()));
    let (build_len, probe_len) = (build.schema().fields().len(), probe.schema().fields().len());
    let build_keys: Vec<_> = join.on().iter().map(|(l, _)| Arc::clone(l)).collect();
    let probe_keys: Vec<_> = join.on().iter().map(|(_, r)| Arc::clone(r)).collect();

    // Build rows: a hot key's with every salt (a list, unnested), others' with salt 0.
    let every: Vec<ScalarValue> = (0..ways as i64)
        .map(|s| ScalarValue::Int64(Some(s)))
        .collect();
    let salts = |values: &[ScalarValue]| {
        ScalarValue::List(ScalarValue::new_list_nullable(values, &DataType::Int64))
    };
    let build_schema = build.schema();
    let all_salts = CaseExpr::try_new(
        None,
        vec![(is_hot(&build_keys, hot, &build_schema)?, lit(salts(&every)))],
        Some(lit(salts(&[ScalarValue::Int64(Some(0))]))),
    )?;
    let listed = ProjectionExec::try_new(
        columns_of(&build_schema).chain([(Arc::new(all_salts) as _, SALT.to_string())]),
        build,
    )?;
    let mut fields: Vec<Field> = build_schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(SALT, DataType::Int64, true));
    let build = Arc::new(UnnestExec::new(
        Arc::new(listed),
        vec![ListUnnest {
            index_in_input_schema: build_len,
            depth: 1,
        }],
        vec![],
        Arc::new(Schema::new_with_metadata(
            fields,
            build_schema.metadata().clone(),
        )),
        UnnestOptions::new().with_preserve_nulls(false),
    )?) as Arc<dyn ExecutionPlan>;

    // Probe rows: a hot key's with a random salt, others' with salt 0.
    let probe_schema = probe.schema();
    let random = ScalarFunctionExpr::try_new(
        datafusion::functions::math::random(),
        vec![],
        &probe_schema,
        Arc::new(Default::default()),
    )?;
    let scaled = binary(
        Arc::new(random),
        Operator::Multiply,
        lit(ScalarValue::Float64(Some(ways as f64))),
        &probe_schema,
    )?;
    let salt = CaseExpr::try_new(
        None,
        vec![(
            is_hot(&probe_keys, hot, &probe_schema)?,
            Arc::new(CastExpr::new(scaled, DataType::Int64, None)),
        )],
        Some(lit(ScalarValue::Int64(Some(0)))),
    )?;
    let probe = Arc::new(ProjectionExec::try_new(
        columns_of(&probe_schema).chain([(Arc::new(salt) as _, SALT.to_string())]),
        probe,
    )?) as Arc<dyn ExecutionPlan>;

    let mut on = join.on().to_vec();
    on.push((
        Arc::new(Column::new(SALT, build_len)) as _,
        Arc::new(Column::new(SALT, probe_len)) as _,
    ));
    // The join's output stays as it was: the salts are projected away.
    let unsalted = join.join_schema().fields().len();
    let projection: Vec<usize> = match &join.projection {
        Some(p) => p.iter().copied().collect(),
        None => (0..unsalted).collect(),
    };
    let moved = |i: usize| match join.join_type() {
        JoinType::Inner | JoinType::Right if i >= build_len => i + 1,
        JoinType::RightMark if i >= probe_len => i + 1,
        _ => i,
    };
    join.builder()
        .with_new_children(vec![build, probe])?
        .with_on(on)
        .with_projection(Some(projection.into_iter().map(moved).collect()))
        .reset_state()
        .build_exec()
}

/// Whether a row's keys are one of the hot keys: `k = 7 OR k = 9`, `(a = 1 AND b = 'x') OR ...`.
fn is_hot(
    keys: &[Arc<dyn PhysicalExpr>],
    hot: &Hot,
    schema: &Schema,
) -> Result<Arc<dyn PhysicalExpr>> {
    let mut any: Option<Arc<dyn PhysicalExpr>> = None;
    for values in &hot.keys {
        let mut all: Option<Arc<dyn PhysicalExpr>> = None;
        for (key, value) in keys.iter().zip(values) {
            let eq = binary(Arc::clone(key), Operator::Eq, lit(value.clone()), schema)?;
            all = Some(match all {
                Some(a) => binary(a, Operator::And, eq, schema)?,
                None => eq,
            });
        }
        let all = all.expect("a join has keys");
        any = Some(match any {
            Some(a) => binary(a, Operator::Or, all, schema)?,
            None => all,
        });
    }
    Ok(any.expect("a hot key"))
}

fn columns_of(schema: &Schema) -> impl Iterator<Item = (Arc<dyn PhysicalExpr>, String)> + '_ {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| (Arc::new(Column::new(f.name(), i)) as _, f.name().clone()))
}

#[cfg(test)]
mod tests {
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::coordinator::test_sessions::partitioned_joins;

    /// Every join of more than 100 rows planned partitioned; `facts.k` is 7 in half its rows.
    async fn session() -> SessionContext {
        partitioned_joins(&[
            "CREATE TABLE facts AS SELECT CASE WHEN value % 2 = 0 THEN 7 ELSE value % 3000 END \
             AS k, value AS v FROM generate_series(1, 20000)",
            "CREATE TABLE dims AS SELECT value AS k, value % 10 AS g FROM generate_series(1, 2000)",
        ])
        .await
    }

    fn hash_join(plan: &Arc<dyn ExecutionPlan>) -> Option<&HashJoinExec> {
        if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
            return Some(join);
        }
        plan.children().into_iter().find_map(hash_join)
    }

    #[tokio::test]
    async fn a_split_join_gives_the_same_rows_and_columns_for_each_type() {
        let ctx = session().await;
        let hot = Hot {
            keys: vec![vec![ScalarValue::Int64(Some(7))]],
            rows: 1,
            sampled: 2,
        };
        for sql in [
            "SELECT facts.v, dims.g FROM facts JOIN dims ON facts.k = dims.k",
            "SELECT facts.v, dims.g FROM dims RIGHT JOIN facts ON facts.k = dims.k",
            "SELECT v FROM facts WHERE EXISTS (SELECT 1 FROM dims WHERE dims.k = facts.k)",
            "SELECT v FROM facts WHERE NOT EXISTS (SELECT 1 FROM dims WHERE dims.k = facts.k)",
        ] {
            let plan = ctx
                .sql(sql)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap();
            let join = hash_join(&plan).expect("a hash join");
            assert!(splittable(join), "{sql}");
            let split = split(join, &hot, 4).unwrap();
            assert_eq!(split.schema(), join.schema(), "{sql}");
            // Settled (hash repartitions on key and salt added) and run: the same rows.
            let config = ctx.state().config_options().clone();
            let settled = super::super::adaptive_joins::settle(split, &config).unwrap();
            let got = collect(settled, ctx.task_ctx()).await.unwrap();
            let want = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            assert_eq!(sorted_rows(&got), sorted_rows(&want), "{sql}");
        }
    }

    fn sorted_rows(batches: &[datafusion::arrow::record_batch::RecordBatch]) -> Vec<String> {
        let mut lines = Vec::new();
        for batch in batches {
            for i in 0..batch.num_rows() {
                let values = batch
                    .columns()
                    .iter()
                    .map(|c| ScalarValue::try_from_array(c, i).unwrap().to_string());
                lines.push(values.collect::<Vec<_>>().join(","));
            }
        }
        lines.sort();
        lines
    }

    #[test]
    fn a_key_is_hot_when_it_doubles_its_partition() {
        // Four partitions: a key of a third of the rows makes its partition 1/3 + 2/3 / 4 =
        // 1/2, twice the average; eight: a seventh.
        assert_eq!(hot_from(3000, 4), 1000);
        assert_eq!(hot_from(7000, 8), 1000);
        assert_eq!(hot_from(1000, 1), 1000);
        assert_eq!(ways(partitions(2, 2)), 8);
        assert_eq!(ways(partitions(16, 8)), 64);
    }

    #[test]
    fn hot_keys_are_shown_as_the_plan_writes_them() {
        let hot = Hot {
            keys: vec![
                vec![ScalarValue::Int64(Some(7))],
                vec![ScalarValue::Int64(Some(9))],
            ],
            rows: 10,
            sampled: 20,
        };
        assert_eq!(hot.shown(), "7, 9");
        let pair = Hot {
            keys: vec![vec![ScalarValue::Int64(Some(7)), ScalarValue::from("b")]],
            ..hot
        };
        assert_eq!(pair.shown(), "(7, b)");
    }
}
