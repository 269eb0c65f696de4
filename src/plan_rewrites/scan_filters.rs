//! Selective joins filter the scans they reduce, across stages.
//!
//! Single-node, a hash join whose build side is small and filtered (`d_year = 1999`) prunes
//! the probe side's scan through its dynamic filter, before anything expensive happens to the
//! rows. Once the plan is cut into stages, a network shuffle often sits between that join and
//! the scan, and the filter never reaches it: TPC-DS q72 then joins every `catalog_sales` row
//! with `inventory` (56 M rows out instead of 15 M) before the date filter drops most of them.
//!
//! So each such join also filters the scan its probe key comes from: a semi join against a
//! copy of the same build side is placed right above that scan, in the scan's own stage, where
//! the distributed planner broadcasts its build like any other collected join. The rows it
//! removes have a key the join above cannot match, and every operator in between is one that
//! passes a row's key through unchanged (no limit, aggregate or window), so no answer changes.
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, NullEquality, Result};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

/// A scan's column, reached from a join key through operators that pass it through.
struct Origin {
    scan: Arc<dyn ExecutionPlan>,
    column: usize,
    /// A hash repartition (a network shuffle once distributed) lies on the way.
    shuffled: bool,
}

/// One semi join to put above a scan: the build side and its keys, paired with scan columns.
struct ScanFilter {
    build: Arc<dyn ExecutionPlan>,
    on: Vec<(PhysicalExprRef, usize)>,
}

/// `plan` with each scan that a selective collected join reduces across a shuffle filtered
/// by a semi join against that join's build side.
pub fn filter_scans_across_stages(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    // Keyed by the scan node's address: the plan is a tree, each scan appears once.
    let mut filters: HashMap<usize, Vec<ScanFilter>> = HashMap::new();
    plan.apply(|node| {
        let Some(join) = node.downcast_ref::<HashJoinExec>() else {
            return Ok(TreeNodeRecursion::Continue);
        };
        if !reduces_probe_side(join) {
            return Ok(TreeNodeRecursion::Continue);
        }
        let mut by_scan: HashMap<usize, ScanFilter> = HashMap::new();
        for (build_key, probe_key) in join.on() {
            let Some(probe) = probe_key.downcast_ref::<Column>() else {
                continue;
            };
            for origin in origins(join.right(), probe.index()) {
                let scan_type = origin
                    .scan
                    .schema()
                    .field(origin.column)
                    .data_type()
                    .clone();
                let build_type = build_key.data_type(&join.left().schema())?;
                if !origin.shuffled || scan_type != build_type {
                    continue;
                }
                by_scan
                    .entry(address(&origin.scan))
                    .or_insert_with(|| ScanFilter {
                        build: Arc::clone(join.left()),
                        on: vec![],
                    })
                    .on
                    .push((Arc::clone(build_key), origin.column));
            }
        }
        for (scan, filter) in by_scan {
            filters.entry(scan).or_default().push(filter);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if filters.is_empty() {
        return Ok(plan);
    }
    plan.transform_up(|node| {
        let Some(scan_filters) = filters.remove(&address(&node)) else {
            return Ok(Transformed::no(node));
        };
        let mut filtered = node;
        for f in scan_filters {
            filtered = semi_join(f, filtered, config)?;
        }
        Ok(Transformed::yes(filtered))
    })
    .map(|t| t.data)
}

/// Whether `join` drops every probe row whose key has no match on a collected, filtered and
/// deterministic build side (so an earlier semi join on that key changes nothing).
fn reduces_probe_side(join: &HashJoinExec) -> bool {
    matches!(join.partition_mode(), PartitionMode::CollectLeft)
        && matches!(
            join.join_type(),
            JoinType::Inner | JoinType::RightSemi | JoinType::Left | JoinType::LeftSemi
        )
        && join.null_equality() == NullEquality::NullEqualsNothing
        && selective_and_deterministic(join.left())
}

/// The build side filters its input (else it keeps every key and filters nothing) and gives
/// the same rows when run twice.
fn selective_and_deterministic(build: &Arc<dyn ExecutionPlan>) -> bool {
    let mut filters = false;
    let mut volatile = false;
    let _ = build.apply(|node| {
        if let Some(f) = node.downcast_ref::<FilterExec>() {
            filters = true;
            volatile |= is_volatile(f.predicate());
        } else if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            volatile |= p.expr().iter().any(|e| is_volatile(&e.expr));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    filters && !volatile
}

/// The scan columns whose values output column `column` of `node` carries unchanged, through
/// operators that keep or drop whole rows without looking at how many there are.
fn origins(node: &Arc<dyn ExecutionPlan>, column: usize) -> Vec<Origin> {
    if node.fetch().is_some() {
        return vec![]; // a limit: fewer rows below lets others through
    }
    let through = |input: &Arc<dyn ExecutionPlan>, column: usize, shuffles: bool| {
        let mut found = origins(input, column);
        found.iter_mut().for_each(|o| o.shuffled |= shuffles);
        found
    };
    if node.is::<DataSourceExec>() {
        return vec![Origin {
            scan: Arc::clone(node),
            column,
            shuffled: false,
        }];
    }
    if let Some(r) = node.downcast_ref::<RepartitionExec>() {
        let hash = matches!(r.partitioning(), Partitioning::Hash(..));
        return through(r.input(), column, hash);
    }
    if node.is::<CoalescePartitionsExec>()
        || node.is::<CooperativeExec>()
        || node.is::<SortExec>()
        || node.is::<SortPreservingMergeExec>()
    {
        return through(node.children()[0], column, false);
    }
    if let Some(p) = node.downcast_ref::<ProjectionExec>() {
        return match p
            .expr()
            .get(column)
            .and_then(|e| e.expr.downcast_ref::<Column>())
        {
            Some(c) => through(p.input(), c.index(), false),
            None => vec![],
        };
    }
    if let Some(f) = node.downcast_ref::<FilterExec>() {
        let column = f
            .projection()
            .as_ref()
            .map_or(Some(column), |p| p.get(column).copied());
        return column.map_or(vec![], |c| through(f.input(), c, false));
    }
    if let Some(u) = node.downcast_ref::<UnionExec>() {
        return u
            .inputs()
            .iter()
            .flat_map(|i| through(i, column, false))
            .collect();
    }
    if let Some(c) = node.downcast_ref::<CrossJoinExec>() {
        return join_side(c.left(), c.right(), &JoinType::Inner, column)
            .map_or(vec![], |(side, col)| through(side, col, false));
    }
    if let Some(j) = node.downcast_ref::<HashJoinExec>() {
        let column = match &j.projection {
            Some(p) => p.get(column).copied(),
            None => Some(column),
        };
        return column
            .and_then(|c| join_side(j.left(), j.right(), j.join_type(), c))
            .map_or(vec![], |(side, col)| through(side, col, false));
    }
    vec![]
}

/// Which input of a join, and which of its columns, output column `column` comes from. An
/// outer join's NULL-extended rows carry NULL there, which the join above drops anyway.
fn join_side<'a>(
    left: &'a Arc<dyn ExecutionPlan>,
    right: &'a Arc<dyn ExecutionPlan>,
    join_type: &JoinType,
    column: usize,
) -> Option<(&'a Arc<dyn ExecutionPlan>, usize)> {
    let n_left = left.schema().fields().len();
    match join_type {
        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
            if column < n_left {
                Some((left, column))
            } else {
                Some((right, column - n_left))
            }
        }
        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
            (column < n_left).then_some((left, column))
        }
        JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
            (column < right.schema().fields().len()).then_some((right, column))
        }
    }
}

/// `scan` keeping only the rows with a match in `filter.build`. The semi join also hands the
/// scan a dynamic filter (DataFusion's own pushdown, run on this pair only), so that the scan
/// skips row groups and pages the build side rules out, as single-node's would.
fn semi_join(
    filter: ScanFilter,
    scan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    let build = own_copy(filter.build)?;
    let build = if build.output_partitioning().partition_count() > 1 {
        Arc::new(CoalescePartitionsExec::new(build))
    } else {
        build
    };
    let schema = scan.schema();
    let on = filter
        .on
        .into_iter()
        .map(|(key, column)| {
            let probe: PhysicalExprRef = Arc::new(Column::new(schema.field(column).name(), column));
            (key, probe)
        })
        .collect();
    let join = Arc::new(HashJoinExec::try_new(
        build,
        scan,
        on,
        None,
        &JoinType::RightSemi,
        None,
        PartitionMode::CollectLeft,
        NullEquality::NullEqualsNothing,
        false,
    )?);
    FilterPushdown::new_post_optimization().optimize(join, config)
}

/// `build` with fresh run state in every node. The copy may land in the same task as the join
/// it was taken from (a one-task stage, or broadcasts turned off), and nodes of one instance
/// share what they run: a scan's queue of files would go to whichever copy drained it first,
/// leaving the other empty.
fn own_copy(build: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    build
        .transform_up(|node| node.reset_state().map(Transformed::yes))
        .map(|t| t.data)
}

fn address(node: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(node) as *const () as usize
}
