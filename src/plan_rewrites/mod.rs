//! Rewrites applied to every plan decoded from datafusion-python before it is distributed:
//! repairs of what DataFusion 55's serialisation loses, filters that must reach scans in
//! other stages, merges a one-partition scan needs once split into tasks, and cancellation
//! points, and top-N per group planned here (datafusion-python cannot serialise it). One runs
//! after distribution: large lists sent as lists between worker processes (`large_lists`).
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

mod compressed_scans;
mod cooperative;
mod generate_series;
mod large_lists;
mod one_partition_scans;
mod parallel_writes;
mod recursive_queries;
mod scan_filters;
mod unique_names;
mod window_sorts;
mod window_topn;

pub use compressed_scans::{restore_compression, CompressedTable};
pub use large_lists::carry_large_lists;
pub use recursive_queries::reveal as reveal_recursive_queries;

/// `plan` as the distributed planner should see it.
pub fn prepare(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = window_topn::plan_window_topn(plan, config)?;
    let plan = unique_names::rename_repeated(plan)?;
    let plan = recursive_queries::hide_recursive_queries(plan)?;
    let plan = generate_series::repair_series_scans(plan)?;
    let plan = window_sorts::sort_all_partition_columns(plan)?;
    let plan = scan_filters::filter_scans_across_stages(plan, config)?;
    let plan = one_partition_scans::merge_split_scans(plan, config)?;
    let plan = parallel_writes::write_from_every_task(plan)?;
    cooperative::yield_after_amplifiers(plan)
}

#[cfg(test)]
mod tests {
    //! Each rewrite on plans DataFusion makes from SQL, before and after.
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::physical_plan::{collect, displayable, ExecutionPlan};
    use datafusion::prelude::SessionContext;
    use datafusion_proto::bytes::{physical_plan_from_bytes, physical_plan_to_bytes};

    use datafusion::prelude::SessionConfig;
    use datafusion_distributed::DistributedConfig;

    use super::{
        compressed_scans, cooperative, generate_series, one_partition_scans, parallel_writes,
        recursive_queries, scan_filters, unique_names, window_sorts, window_topn,
    };

    fn session() -> SessionContext {
        let ctx = SessionContext::new();
        let col = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let batch =
            RecordBatch::try_from_iter([("a", col(vec![1, 2, 3])), ("b", col(vec![3, 2, 1]))])
                .unwrap();
        ctx.register_batch("t", batch).unwrap();
        ctx
    }

    async fn physical(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        let df = ctx.sql(sql).await.unwrap();
        df.create_physical_plan().await.unwrap()
    }

    fn shown(plan: &Arc<dyn ExecutionPlan>) -> String {
        displayable(plan.as_ref()).indent(false).to_string()
    }

    type Rewrite = fn(Arc<dyn ExecutionPlan>) -> datafusion::common::Result<Arc<dyn ExecutionPlan>>;

    /// `rewrite` leaves `plan` as it is.
    fn assert_unchanged(plan: Arc<dyn ExecutionPlan>, rewrite: Rewrite) {
        let before = shown(&plan);
        assert_eq!(shown(&rewrite(plan).unwrap()), before);
    }

    #[tokio::test]
    async fn a_cooperative_point_goes_above_each_join_and_nowhere_else() {
        let ctx = session();
        let join = physical(&ctx, "SELECT * FROM t x JOIN t y ON x.a = y.a").await;
        let before = shown(&join);
        let after = shown(&cooperative::yield_after_amplifiers(join).unwrap());
        let lines: Vec<&str> = after.lines().map(str::trim_start).collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("HashJoinExec"))
            .unwrap();
        assert!(
            lines[at - 1].starts_with("CooperativeExec"),
            "{before}\n=>\n{after}"
        );
        assert_eq!(
            after.matches("CooperativeExec").count(),
            before.matches("CooperativeExec").count() + 1
        );
        let scan = physical(&ctx, "SELECT a FROM t WHERE b > 1").await;
        assert_unchanged(scan, cooperative::yield_after_amplifiers);
    }

    #[tokio::test]
    async fn the_sort_under_a_window_gets_every_partition_column() {
        use datafusion::common::tree_node::{Transformed, TreeNode};
        use datafusion::physical_expr::LexOrdering;
        use datafusion::physical_plan::sorts::sort::SortExec;

        let ctx = session();
        let sql = "SELECT row_number() OVER (PARTITION BY a, b ORDER BY b) AS r FROM t";
        // As DataFusion plans it when the input's equivalences imply `b` from `a` (TPC-DS
        // q47): the sort under the window on `a` only.
        let shortened = physical(&ctx, sql)
            .await
            .transform_up(|node| {
                let Some(sort) = node.downcast_ref::<SortExec>() else {
                    return Ok(Transformed::no(node));
                };
                let first = LexOrdering::new(sort.expr().iter().take(1).cloned()).unwrap();
                let short = SortExec::new(first, Arc::clone(sort.input()))
                    .with_preserve_partitioning(sort.preserve_partitioning());
                Ok(Transformed::yes(Arc::new(short) as Arc<dyn ExecutionPlan>))
            })
            .unwrap()
            .data;
        let before = shown(&shortened);
        assert!(
            before.contains("SortExec: expr=[a@0 ASC NULLS LAST]"),
            "{before}"
        );
        let after = shown(&window_sorts::sort_all_partition_columns(shortened).unwrap());
        assert!(
            after.contains("SortExec: expr=[a@0 ASC NULLS LAST, b@1 ASC]"),
            "{before}\n=>\n{after}"
        );
        // A sort that already covers them is left as it is.
        assert_unchanged(
            physical(&ctx, sql).await,
            window_sorts::sort_all_partition_columns,
        );
    }

    #[tokio::test]
    async fn a_columnless_series_scan_survives_serialisation_once_repaired() {
        let ctx = session();
        let plan = physical(
            &ctx,
            "SELECT count(*) AS n FROM generate_series(1, 10) WHERE random() >= 0",
        )
        .await;
        // As a worker receives it: serialised and decoded.
        let bytes = physical_plan_to_bytes(plan).unwrap();
        let decoded = physical_plan_from_bytes(&bytes, &ctx.task_ctx()).unwrap();
        let before = shown(&decoded);
        let repaired = generate_series::repair_series_scans(decoded).unwrap();
        let after = shown(&repaired);
        assert_ne!(before, after);
        assert!(after.contains("ProjectionExec: expr=[]"), "{after}");
        let again =
            physical_plan_from_bytes(&physical_plan_to_bytes(repaired).unwrap(), &ctx.task_ctx())
                .unwrap();
        let batches = collect(again, ctx.task_ctx()).await.unwrap();
        let n = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(n.value(0), 10);
    }

    /// A directory of its own under the system's temporary one.
    fn scratch() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("dfdpy-rewrites-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `ctx`'s options with the distributed planner's, as a query is prepared with them.
    fn distributed_options(
        ctx: &SessionContext,
        d_cfg: DistributedConfig,
    ) -> datafusion::common::config::ConfigOptions {
        let mut options = ctx.copied_config().options().as_ref().clone();
        options.extensions.insert(d_cfg);
        options
    }

    #[tokio::test]
    async fn a_one_partition_scan_that_will_be_split_is_merged_before_its_limit_or_sort() {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
        let col = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let batch = RecordBatch::try_from_iter([("a", col(vec![3, 1, 2]))]).unwrap();
        ctx.register_batch("t", batch).unwrap();
        let mut may_split = DistributedConfig::default();
        may_split.dynamic_task_count = true;
        let split = distributed_options(&ctx, may_split);
        // LIMIT 1 pushed into the scan: each task would give its own first row.
        let limit = physical(&ctx, "SELECT a FROM t LIMIT 1").await;
        let before = shown(&limit);
        assert!(!before.contains("CoalescePartitionsExec"), "{before}");
        let after =
            shown(&one_partition_scans::merge_split_scans(Arc::clone(&limit), &split).unwrap());
        let lines: Vec<&str> = after.lines().map(str::trim_start).collect();
        assert!(
            lines[lines.len() - 2].starts_with("CoalescePartitionsExec: fetch=1"),
            "{before}\n=>\n{after}"
        );
        // A sort of the whole input: the tasks' rows meet below it.
        let sort = physical(&ctx, "SELECT a FROM t ORDER BY a").await;
        let after = shown(&one_partition_scans::merge_split_scans(sort, &split).unwrap());
        let lines: Vec<&str> = after.lines().map(str::trim_start).collect();
        assert!(lines[0].starts_with("SortExec"), "{after}");
        assert!(lines[1].starts_with("CoalescePartitionsExec"), "{after}");
        // A scan that stays one task is left alone.
        let mut one = DistributedConfig::default();
        one.max_tasks_per_stage = 1;
        let one_task = distributed_options(&ctx, one);
        let unsplit = one_partition_scans::merge_split_scans(limit, &one_task).unwrap();
        assert_eq!(shown(&unsplit), before);
    }

    #[tokio::test]
    async fn a_directory_write_moves_its_sink_into_every_task() {
        let ctx = session();
        let out = scratch();
        let copy = format!(
            "COPY (SELECT a FROM t) TO '{}/' STORED AS parquet",
            out.display()
        );
        let plan = physical(&ctx, &copy).await;
        let before = shown(&plan);
        let after = shown(&parallel_writes::write_from_every_task(plan).unwrap());
        let names: Vec<&str> = after
            .lines()
            .map(|l| l.trim_start().split([':', ' ']).next().unwrap())
            .collect();
        assert_eq!(
            &names[..4],
            [
                "SumCounts",
                "CoalescePartitionsExec",
                "DataSinkExec",
                "MergeTaskPartitions"
            ],
            "{before}\n=>\n{after}"
        );
        // One file: written where its rows meet, as single-node does.
        let one_file = format!("COPY (SELECT a FROM t) TO '{}/one.parquet'", out.display());
        assert_unchanged(
            physical(&ctx, &one_file).await,
            parallel_writes::write_from_every_task,
        );
        std::fs::remove_dir_all(out).unwrap();
    }

    #[tokio::test]
    async fn a_gzip_table_decoded_without_its_compression_reads_compressed_again() {
        use datafusion::datasource::physical_plan::FileScanConfig;
        use datafusion::datasource::source::DataSourceExec;
        use datafusion_proto::bytes::logical_plan_to_bytes;

        let ctx = session();
        let dir = scratch();
        let write = format!(
            "COPY (SELECT a, b FROM t) TO '{}/' STORED AS csv \
             OPTIONS ('format.compression' 'gzip', 'format.has_header' 'true')",
            dir.display()
        );
        ctx.sql(&write).await.unwrap().collect().await.unwrap();
        let create = format!(
            "CREATE EXTERNAL TABLE g STORED AS CSV LOCATION '{}/' \
             OPTIONS ('format.compression' 'gzip', 'format.has_header' 'true')",
            dir.display()
        );
        ctx.sql(&create).await.unwrap();
        let plan = physical(&ctx, "SELECT a, b FROM g ORDER BY a").await;
        // As the coordinator receives it: the bytes carry no compression.
        let decoded =
            physical_plan_from_bytes(&physical_plan_to_bytes(plan).unwrap(), &ctx.task_ctx())
                .unwrap();
        let compression = |plan: &Arc<dyn ExecutionPlan>| {
            let mut found = vec![];
            let _ = datafusion::common::tree_node::TreeNode::apply(plan, |node| {
                if let Some(scan) = node
                    .downcast_ref::<DataSourceExec>()
                    .and_then(|s| s.data_source().downcast_ref::<FileScanConfig>())
                {
                    found.push(scan.file_compression_type.is_compressed());
                }
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            });
            found
        };
        assert_eq!(compression(&decoded), [false]);
        let scan = ctx.table("g").await.unwrap().into_unoptimized_plan();
        let table = compressed_scans::CompressedTable::from_logical_scan(
            &logical_plan_to_bytes(&scan).unwrap(),
        )
        .unwrap()
        .expect("a gzip table");
        let restored = compressed_scans::restore_compression(decoded, &[table]).unwrap();
        assert_eq!(compression(&restored), [true]);
        let batches = collect(restored, ctx.task_ctx()).await.unwrap();
        let a = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(a.values(), &[1, 2, 3]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_selective_join_across_a_shuffle_filters_the_scan_its_key_comes_from() {
        let config = SessionConfig::new().with_target_partitions(4);
        let ctx = SessionContext::new_with_config(config);
        let dir = scratch();
        let tables = [
            (
                "sales",
                "SELECT value AS s_id, (value % 1024) * 3 AS s_date, \
                 (value * 7919) % 4096 AS s_item, value % 63 AS s_qty \
                 FROM generate_series(0, 59999)",
            ),
            (
                "stock",
                "SELECT (value * 7919) % 4096 AS st_item, (value * 13) % 63 AS st_qty \
                 FROM generate_series(0, 59999)",
            ),
            (
                "dates",
                "SELECT value AS d_sk, 1995 + value / 365 AS d_year FROM generate_series(0, 3649)",
            ),
        ];
        for (name, rows) in tables {
            let path = dir.join(name);
            let copy = format!("COPY ({rows}) TO '{}/' STORED AS parquet", path.display());
            ctx.sql(&copy).await.unwrap().collect().await.unwrap();
            ctx.register_parquet(name, path.to_str().unwrap(), Default::default())
                .await
                .unwrap();
        }
        // The fact tables' join is shuffled (partitioned); the filtered dimension is collected.
        for set in [
            "SET datafusion.optimizer.hash_join_single_partition_threshold = 200000",
            "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 20000",
        ] {
            ctx.sql(set).await.unwrap();
        }
        let q72_shape = "SELECT d_year, count(*) AS n FROM sales \
                         JOIN stock ON s_item = st_item AND st_qty < s_qty \
                         JOIN dates ON s_date = d_sk WHERE d_year = 1999 GROUP BY d_year";
        let plan = physical(&ctx, q72_shape).await;
        let options = distributed_options(&ctx, DistributedConfig::default());
        let before = shown(&plan);
        let after =
            shown(&scan_filters::filter_scans_across_stages(Arc::clone(&plan), &options).unwrap());
        assert!(!before.contains("RightSemi"), "{before}");
        let semi: Vec<&str> = after
            .lines()
            .filter(|l| l.contains("join_type=RightSemi"))
            .collect();
        assert_eq!(semi.len(), 1, "{before}\n=>\n{after}");
        assert!(semi[0].contains("on=[(d_sk@0, s_date@"), "{after}");
        // Same answer.
        let rows = |plan| async { collect(plan, ctx.task_ctx()).await.unwrap() };
        let want = datafusion::arrow::util::pretty::pretty_format_batches(&rows(plan).await)
            .unwrap()
            .to_string();
        let rewritten =
            scan_filters::filter_scans_across_stages(physical(&ctx, q72_shape).await, &options)
                .unwrap();
        let got = datafusion::arrow::util::pretty::pretty_format_batches(&rows(rewritten).await)
            .unwrap()
            .to_string();
        assert_eq!(got, want);
        // A join with nothing to filter (no WHERE on the dimension) is left alone.
        let unselective = physical(
            &ctx,
            "SELECT count(*) FROM sales JOIN dates ON s_date = d_sk",
        )
        .await;
        let shown_before = shown(&unselective);
        let unchanged = scan_filters::filter_scans_across_stages(unselective, &options).unwrap();
        assert_eq!(shown(&unchanged), shown_before);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn top_n_per_group_is_planned_with_a_heap_before_the_shuffle() {
        let sql = "SELECT * FROM (SELECT a, b, row_number() OVER (PARTITION BY a ORDER BY b) \
                   AS r FROM t) WHERE r <= 1";
        // Two partitions: the window's groups are gathered by a hash shuffle.
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let part = |a: Vec<i64>, b: Vec<i64>| {
            let col = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
            RecordBatch::try_from_iter([("a", col(a)), ("b", col(b))]).unwrap()
        };
        let (one, two) = (
            part(vec![1, 2, 1], vec![5, 4, 3]),
            part(vec![2, 1, 3], vec![1, 2, 3]),
        );
        let table =
            datafusion::datasource::MemTable::try_new(one.schema(), vec![vec![one], vec![two]]);
        ctx.register_table("t", Arc::new(table.unwrap())).unwrap();
        // As datafusion-python plans it for us: the rule off.
        let off = physical(&ctx, sql).await;
        assert!(!shown(&off).contains("PartitionedTopKExec"));
        let mut options = ctx.state().config_options().as_ref().clone();
        assert_eq!(
            shown(&window_topn::plan_window_topn(Arc::clone(&off), &options).unwrap()),
            shown(&off)
        );
        options.optimizer.enable_window_topn = true;
        let on = window_topn::plan_window_topn(Arc::clone(&off), &options).unwrap();
        let after = shown(&on);
        let lines: Vec<&str> = after.lines().map(str::trim_start).collect();
        let heaps: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("PartitionedTopKExec"))
            .collect();
        assert_eq!(heaps.len(), 2, "{after}");
        assert!(
            lines[heaps[0] + 1].starts_with("RepartitionExec: partitioning=Hash"),
            "{after}"
        );
        assert!(
            !after.contains("FilterExec") && !after.contains("SortExec"),
            "{after}"
        );
        let rows = |plan| async { collect(plan, ctx.task_ctx()).await.unwrap() };
        let (a, b) = (rows(off).await, rows(on).await);
        let count =
            |batches: &Vec<RecordBatch>| batches.iter().map(|b| b.num_rows()).sum::<usize>();
        assert_eq!(count(&a), count(&b));
    }

    #[tokio::test]
    async fn repeated_names_get_distinct_ones_and_the_rows_stay() {
        let ctx = session();
        let join = physical(&ctx, "SELECT * FROM t x JOIN t y ON x.a = y.a").await;
        let names = |p: &Arc<dyn ExecutionPlan>| {
            p.schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&join), ["a", "b", "a", "b"]);
        let renamed = unique_names::rename_repeated(Arc::clone(&join)).unwrap();
        assert_eq!(names(&renamed), ["a", "b", "a#2", "b#2"]);
        let task = ctx.task_ctx();
        let (before, after) = (
            collect(join, Arc::clone(&task)).await.unwrap(),
            collect(renamed, task).await.unwrap(),
        );
        let columns = |batches: &Vec<RecordBatch>| {
            batches
                .iter()
                .flat_map(|b| b.columns().to_vec())
                .collect::<Vec<ArrayRef>>()
        };
        assert_eq!(columns(&before), columns(&after));
        let distinct = physical(&ctx, "SELECT a, b FROM t").await;
        assert_unchanged(distinct, unique_names::rename_repeated);
    }

    #[tokio::test]
    async fn a_recursive_query_is_hidden_whole_and_given_back() {
        let ctx = session();
        let sql = "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 5) \
                   SELECT n.k, t.b FROM n JOIN t ON n.k = t.a";
        let plan = physical(&ctx, sql).await;
        let before = shown(&plan);
        assert!(before.contains("RecursiveQueryExec"), "{before}");
        let hidden = recursive_queries::hide_recursive_queries(Arc::clone(&plan)).unwrap();
        let text = shown(&hidden);
        // The query is one leaf: nothing of it (its work table, its terms) shows any more;
        // what reads it (the join, the other table) is left to the planner.
        assert!(text.contains("InOneTask: RecursiveQueryExec"), "{text}");
        assert!(
            !text.contains("WorkTableExec") && text.contains("HashJoinExec"),
            "{text}"
        );
        let revealed = recursive_queries::reveal(hidden).unwrap();
        assert_eq!(shown(&revealed), before);
        let rows = collect(revealed, ctx.task_ctx()).await.unwrap();
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
        let plain = physical(&ctx, "SELECT a FROM t").await;
        assert_unchanged(plain, recursive_queries::hide_recursive_queries);
    }
}
