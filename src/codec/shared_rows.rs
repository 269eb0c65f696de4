//! An in-process task's copy of its plan fragment shares the fragment's in-memory rows.
//!
//! `copy_fragment` copies a fragment through its protobuf messages, so that each in-process
//! task gets a fresh plan (fresh run state, dynamic filters linked within the copy) as a worker
//! process would. Rows held in the plan (an in-memory table's, a join's build side run first)
//! need no copy: they are immutable. Through the messages they cost an Arrow IPC write and
//! read per task, a tenth of TPC-H q18's CPU on the embedded cluster. This converter leaves a
//! mark in their place while encoding and puts a new scan of the same batches there while
//! decoding. Everything else goes through datafusion-proto as `DeduplicatingProtoConverter`
//! takes it: expressions that share an id (a pushed-down dynamic filter) are decoded once.
//!
//! Upstream: datafusion-proto 55 encodes an extension node's children without going back
//! through the converter (its decoding does go back), so an extension node above rows is
//! written here, as datafusion-proto writes it, with its children through this converter.
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::Schema;
use datafusion::common::{internal_err, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::{DataSource, DataSourceExec};
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion_proto::physical_plan::from_proto::parse_physical_expr_with_converter;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr_with_converter;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalPlanNodeExt,
    PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::physical_plan_node::PhysicalPlanType;
use datafusion_proto::protobuf::{PhysicalExprNode, PhysicalExtensionNode, PhysicalPlanNode};

use crate::batches::in_own_buffers;

/// What marks a shared scan's place in the messages (followed by its index): no codec of
/// ours writes it, and the messages never leave this process.
const MARK: &[u8] = b"dfdpy/shared-rows/";

/// A converter for one copy: encode with it, then decode with it.
#[derive(Default)]
pub struct ShareRows {
    scans: RefCell<Vec<MemorySourceConfig>>,
    decoded: RefCell<HashMap<u64, Arc<dyn PhysicalExpr>>>,
}

impl ShareRows {
    /// Bytes of the rows shared rather than copied (what their messages would have held).
    pub fn shared_bytes(&self) -> usize {
        let scans = self.scans.borrow();
        let batches = scans.iter().flat_map(|s| s.partitions().iter().flatten());
        batches.map(|b| b.get_array_memory_size()).sum()
    }
}

fn memory_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<&MemorySourceConfig> {
    let scan: &DataSourceExec = plan.downcast_ref()?;
    scan.data_source().downcast_ref()
}

/// Whether `plan` or a node below it is an in-memory scan.
pub fn holds_rows(plan: &Arc<dyn ExecutionPlan>) -> bool {
    memory_scan(plan).is_some() || plan.children().into_iter().any(holds_rows)
}

/// `scan` with its sliced batches copied to buffers of their own, as the messages would copy
/// them: a batch's memory size is what the memory pool and the HTML formatter's early stop
/// count, and a slice counts its whole buffers (each task's share of a dealt table).
fn compacted(scan: &MemorySourceConfig) -> Result<MemorySourceConfig> {
    let own = |batch: &RecordBatch| {
        let slack = 64 * batch.num_columns();
        in_own_buffers(batch.clone(), |used| used + used / 8 + slack)
    };
    let partition = |batches: &Vec<RecordBatch>| batches.iter().map(own).collect();
    let partitions = scan
        .partitions()
        .iter()
        .map(partition)
        .collect::<Result<Vec<_>>>()?;
    let copy = MemorySourceConfig::try_new(
        &partitions,
        scan.original_schema(),
        scan.projection().clone(),
    )?
    .with_show_sizes(scan.show_sizes())
    .with_limit(scan.fetch());
    match scan.sort_information() {
        [] => Ok(copy),
        orderings => copy.try_with_sort_information(orderings.to_vec()),
    }
}

fn shared_index(proto: &PhysicalPlanNode) -> Option<usize> {
    let Some(PhysicalPlanType::Extension(ext)) = &proto.physical_plan_type else {
        return None;
    };
    let index = ext.node.strip_prefix(MARK)?;
    Some(u64::from_le_bytes(index.try_into().ok()?) as usize)
}

impl ShareRows {
    /// `plan` as an extension node with its children written by this converter, when it is
    /// one (an extension codec writes it) and rows are below it; else None.
    fn extension_above_rows(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<Option<PhysicalPlanNode>> {
        if !plan.children().into_iter().any(holds_rows) {
            return Ok(None);
        }
        let mut node = Vec::new();
        if codec.try_encode(Arc::clone(plan), &mut node, self).is_err() {
            return Ok(None); // one of DataFusion's own: its children come back through here
        }
        let inputs = plan.children().into_iter();
        let inputs = inputs.map(|child| self.execution_plan_to_proto(child, codec));
        Ok(Some(PhysicalPlanNode {
            physical_plan_type: Some(PhysicalPlanType::Extension(PhysicalExtensionNode {
                node,
                inputs: inputs.collect::<Result<_>>()?,
            })),
        }))
    }
}

impl PhysicalProtoConverterExtension for ShareRows {
    fn proto_to_execution_plan(
        &self,
        proto: &PhysicalPlanNode,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(index) = shared_index(proto) else {
            return proto.try_into_physical_plan_with_context(ctx, self);
        };
        match self.scans.borrow().get(index) {
            Some(scan) => Ok(DataSourceExec::from_data_source(scan.clone())),
            None => internal_err!("shared rows {index} were not encoded by this copy"),
        }
    }

    fn execution_plan_to_proto(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<PhysicalPlanNode> {
        if let Some(scan) = memory_scan(plan) {
            let mut scans = self.scans.borrow_mut();
            let node = [MARK, &(scans.len() as u64).to_le_bytes()].concat();
            scans.push(compacted(scan)?);
            return Ok(PhysicalPlanNode {
                physical_plan_type: Some(PhysicalPlanType::Extension(PhysicalExtensionNode {
                    node,
                    inputs: Vec::new(),
                })),
            });
        }
        if let Some(node) = self.extension_above_rows(plan, codec)? {
            return Ok(node);
        }
        PhysicalPlanNode::try_from_physical_plan_with_converter(Arc::clone(plan), codec, self)
    }

    fn proto_to_physical_expr(
        &self,
        proto: &PhysicalExprNode,
        input_schema: &Schema,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let parsed = parse_physical_expr_with_converter(proto, input_schema, ctx, self)?;
        let Some(id) = proto.expr_id else {
            return Ok(parsed);
        };
        let mut decoded = self.decoded.borrow_mut();
        if let Some(first) = decoded.get(&id) {
            // Derived from the first one, as DataFusion derives them: a dynamic filter's
            // copies then share its state, as in the plan that was encoded.
            let children = parsed.children().into_iter().cloned().collect();
            return Arc::clone(first).with_new_children(children);
        }
        decoded.insert(id, Arc::clone(&parsed));
        Ok(parsed)
    }

    fn physical_expr_to_proto(
        &self,
        expr: &Arc<dyn PhysicalExpr>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<PhysicalExprNode> {
        serialize_physical_expr_with_converter(expr, codec, self)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::datasource::MemTable;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;
    use datafusion_distributed::BroadcastExec;
    use datafusion_proto::physical_plan::DefaultPhysicalExtensionCodec;

    use super::*;
    use crate::codec::{copy_fragment, fragment_codec};

    fn first_buffer(plan: &Arc<dyn ExecutionPlan>) -> *const u8 {
        let scan = the_scan(plan);
        let rows = memory_scan(&scan).unwrap().partitions()[0][0]
            .column(0)
            .to_data();
        rows.buffers()[0].as_ptr()
    }

    /// A plan over 1000 in-memory rows, and the context it was planned in.
    async fn planned(sql: &str) -> (SessionContext, Arc<dyn ExecutionPlan>) {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..1000))],
        )
        .unwrap();
        let ctx = SessionContext::new();
        let table = MemTable::try_new(schema, vec![vec![batch]]).unwrap();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let plan = ctx.sql(sql).await.unwrap();
        (ctx.clone(), plan.create_physical_plan().await.unwrap())
    }

    fn the_scan(plan: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        if memory_scan(plan).is_some() {
            return Arc::clone(plan);
        }
        let below = plan.children().into_iter().find(|c| holds_rows(c));
        the_scan(below.expect("a memory scan"))
    }

    #[tokio::test]
    async fn a_copy_shares_its_rows_and_gives_the_same_answer() {
        let sql = "SELECT a % 7 AS k, count(*) AS n FROM t WHERE a > 10 GROUP BY a % 7 ORDER BY k";
        let (ctx, plan) = planned(sql).await;
        let codec = fragment_codec(Arc::new(DefaultPhysicalExtensionCodec {}));
        let task_ctx = ctx.task_ctx();
        let (copy, bytes) = copy_fragment(&plan, &task_ctx, &codec).unwrap();
        assert!(!Arc::ptr_eq(&plan, &copy));
        assert_eq!(first_buffer(&plan), first_buffer(&copy), "rows are shared");
        assert!(
            bytes >= 8000,
            "the rows count in what the copy carries: {bytes}"
        );
        let ours = collect(copy, Arc::clone(&task_ctx)).await.unwrap();
        let theirs = collect(plan, Arc::clone(&task_ctx)).await.unwrap();
        assert_eq!(ours, theirs);
    }

    #[tokio::test]
    async fn rows_below_an_extension_node_are_shared_too() {
        // The broadcast a join's build side run first goes through: datafusion-distributed's
        // node, written by its codec.
        let (ctx, plan) = planned("SELECT a FROM t").await;
        let broadcast: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(Arc::new(
            BroadcastExec::new(the_scan(&plan), 1),
        )));
        let codec = fragment_codec(Arc::new(DefaultPhysicalExtensionCodec {}));
        let (copy, _) = copy_fragment(&broadcast, &ctx.task_ctx(), &codec).unwrap();
        assert!(copy.children()[0].is::<BroadcastExec>());
        assert_eq!(
            first_buffer(&broadcast),
            first_buffer(&copy),
            "rows are shared"
        );
    }

    #[test]
    fn a_slice_is_copied_to_buffers_of_its_own_and_a_whole_batch_is_not() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let whole = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..100_000))],
        )
        .unwrap();
        let slice = whole.slice(10, 1000);
        let scan = MemorySourceConfig::try_new(&[vec![whole.clone(), slice.clone()]], schema, None)
            .unwrap()
            .with_limit(Some(500));
        let copy = compacted(&scan).unwrap();
        let [kept, copied] = &copy.partitions()[0][..] else {
            panic!("two batches")
        };
        assert_eq!(
            kept.column(0).to_data().buffers()[0].as_ptr(),
            whole.column(0).to_data().buffers()[0].as_ptr()
        );
        assert_eq!(copied, &slice);
        assert!(
            copied.get_array_memory_size() < 10_000,
            "{}",
            copied.get_array_memory_size()
        );
        assert!(slice.get_array_memory_size() > 800_000);
        assert_eq!(copy.fetch(), Some(500));
    }

    #[tokio::test]
    async fn a_mark_no_copy_wrote_is_refused() {
        let (ctx, _) = planned("SELECT a FROM t").await;
        let codec = fragment_codec(Arc::new(DefaultPhysicalExtensionCodec {}));
        let mark = PhysicalPlanNode {
            physical_plan_type: Some(PhysicalPlanType::Extension(PhysicalExtensionNode {
                node: [MARK, &5u64.to_le_bytes()].concat(),
                inputs: Vec::new(),
            })),
        };
        let task_ctx = ctx.task_ctx();
        let decode_ctx = PhysicalPlanDecodeContext::new(task_ctx.as_ref(), &codec);
        let refused = ShareRows::default().proto_to_execution_plan(&mark, &decode_ctx);
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("not encoded by this copy"));
    }
}
