//! `PartitionedTopKExec` (top-N per group, planned under
//! `datafusion.optimizer.enable_window_topn`) in fragments: DataFusion 55's encoding has no
//! form for it. Its sort keys are written as DataFusion writes any sort (through the
//! session's converter, so any expression a sort can hold travels), beside its K, the length
//! of its group key and its window function.
use std::sync::Arc;

use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::sorts::partitioned_topk::{PartitionedTopKExec, WindowFnKind};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_physical_sort_exprs;
use datafusion_proto::physical_plan::to_proto::serialize_physical_sort_exprs;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalSortExprNodeCollection;
use prost::Message;

use crate::plan_nodes::only;

const TAG: &[u8] = b"dfdpy.window_topn:";

/// What a `PartitionedTopKExec` holds besides its sort keys.
#[derive(serde::Serialize, serde::Deserialize)]
struct Shape {
    fetch: usize,
    partition_prefix_len: usize,
    rank: bool,
    /// The sort keys, as `PhysicalSortExprNodeCollection` bytes.
    keys: Vec<u8>,
}

pub fn encode(
    node: &Arc<dyn ExecutionPlan>,
    buf: &mut Vec<u8>,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Option<Result<()>> {
    let topk = node.downcast_ref::<PartitionedTopKExec>()?;
    Some((|| {
        let keys = serialize_physical_sort_exprs(topk.expr().iter().cloned(), codec, converter)?;
        let keys = PhysicalSortExprNodeCollection {
            physical_sort_expr_nodes: keys,
        }
        .encode_to_vec();
        let shape = Shape {
            fetch: topk.fetch(),
            partition_prefix_len: topk.partition_prefix_len(),
            rank: topk.fn_kind() == WindowFnKind::Rank,
            keys,
        };
        buf.extend_from_slice(TAG);
        serde_json::to_writer(&mut *buf, &shape)
            .map_err(|e| exec_datafusion_err!("encoding PartitionedTopKExec: {e}"))
    })())
}

pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
    ctx: &TaskContext,
    codec: &dyn PhysicalExtensionCodec,
    converter: &dyn PhysicalProtoConverterExtension,
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let rest = buf.strip_prefix(TAG)?;
    Some((|| {
        let shape: Shape = serde_json::from_slice(rest)
            .map_err(|e| exec_datafusion_err!("decoding PartitionedTopKExec: {e}"))?;
        let input = only(inputs, "PartitionedTopKExec")?;
        let keys = PhysicalSortExprNodeCollection::decode(shape.keys.as_slice())
            .map_err(|e| exec_datafusion_err!("decoding PartitionedTopKExec's keys: {e}"))?;
        let decoding = PhysicalPlanDecodeContext::new(ctx, codec);
        let keys = parse_physical_sort_exprs(
            &keys.physical_sort_expr_nodes,
            &decoding,
            &input.schema(),
            converter,
        )?;
        let expr = LexOrdering::new(keys)
            .ok_or_else(|| exec_datafusion_err!("PartitionedTopKExec without sort keys"))?;
        let kind = match shape.rank {
            true => WindowFnKind::Rank,
            false => WindowFnKind::RowNumber,
        };
        let topk = PartitionedTopKExec::try_new(
            input,
            expr,
            shape.partition_prefix_len,
            shape.fetch,
            kind,
        )?;
        Ok(Arc::new(topk) as _)
    })())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{ArrayRef, Int64Array};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::*;
    use crate::codec::test_support::{physical, round_trip, rows};

    #[tokio::test]
    async fn a_top_n_heap_travels_with_its_keys_k_and_kind() {
        let mut config = SessionConfig::new().with_target_partitions(2);
        config.options_mut().optimizer.enable_window_topn = true;
        let ctx = SessionContext::new_with_config(config);
        let col = |v: Vec<Option<i64>>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let batch = RecordBatch::try_from_iter([
            ("g", col(vec![Some(1), Some(1), Some(1), Some(2), Some(2)])),
            ("v", col(vec![Some(3), None, Some(3), Some(1), Some(2)])),
        ])
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        for (sql, shown) in [
            (
                "SELECT * FROM (SELECT g, v, rank() OVER (PARTITION BY g ORDER BY v DESC \
                 NULLS FIRST) AS r FROM t) WHERE r <= 1",
                "fn=rank, fetch=1, partition=[g@0], order=[v@1 DESC]",
            ),
            (
                "SELECT * FROM (SELECT g, v, row_number() OVER (PARTITION BY g ORDER BY v) \
                 AS r FROM t) WHERE r < 3",
                "fn=row_number, fetch=2, partition=[g@0], order=[v@1 ASC NULLS LAST]",
            ),
        ] {
            let plan = physical(&ctx, sql).await;
            let before = displayable(plan.as_ref()).indent(false).to_string();
            assert!(before.contains(shown), "{before}");
            let task_ctx = ctx.task_ctx();
            let back = round_trip(Arc::clone(&plan), &task_ctx);
            assert_eq!(displayable(back.as_ref()).indent(false).to_string(), before);
            let sorted = |text: String| {
                let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
                lines.sort();
                lines
            };
            assert_eq!(
                sorted(rows(back, Arc::clone(&task_ctx)).await),
                sorted(rows(plan, task_ctx).await)
            );
        }
    }
}
