//! Rewrites applied to every plan decoded from datafusion-python before it is distributed:
//! repairs of what DataFusion 55's serialisation loses, filters that must reach scans in
//! other stages, merges a one-partition scan needs once split into tasks, and cancellation
//! points.
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

mod compressed_scans;
mod cooperative;
mod generate_series;
mod lost_in_transit;
mod one_partition_scans;
mod parallel_writes;
mod scan_filters;
mod window_sorts;

pub use compressed_scans::{restore_compression, CompressedTable};
pub use lost_in_transit::check_nothing_lost;

/// `plan` as the distributed planner should see it.
pub fn prepare(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
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

    use super::{cooperative, generate_series, window_sorts};

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
}
