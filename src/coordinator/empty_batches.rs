//! A zero-row batch, which Arrow Flight does not carry, given back to the result.
//!
//! Single-node, an empty in-memory batch read through operators that pass batches on
//! (projections, limits, merges of partitions) reaches the caller as one empty batch:
//! `show()` prints the header, `execute_stream()` yields it. arrow-flight's encoder skips
//! zero-row batches, so from a worker process such a result arrived as no batch at all. When
//! the plan is such a chain over a memory scan holding an empty batch and the run delivered
//! nothing, the result gets its empty batch back (once, in its first partition).
//!
//! Upstream: arrow-flight 59 `split_batch_for_grpc_response` returns no batch for zero rows.
use std::sync::Arc;

use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{DistributedExec, DistributedLeafExec, NetworkBoundaryExt};

/// Whether single-node would hand an empty batch of `plan` to the caller when it has no rows.
pub fn passes_on_an_empty_batch(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(boundary) = plan.as_network_boundary() {
        return boundary
            .input_stage()
            .local_plan()
            .is_some_and(passes_on_an_empty_batch);
    }
    if let Some(leaf) = plan.downcast_ref::<DistributedLeafExec>() {
        return leaf.variants().iter().any(passes_on_an_empty_batch);
    }
    if let Some(scan) = plan.downcast_ref::<DataSourceExec>() {
        let memory = scan.data_source().downcast_ref::<MemorySourceConfig>();
        return memory.is_some_and(|m| m.partitions().iter().flatten().any(|b| b.num_rows() == 0));
    }
    let passes = plan.is::<DistributedExec>()
        || plan.is::<ProjectionExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<RepartitionExec>()
        || plan.is::<CooperativeExec>()
        || plan.is::<GlobalLimitExec>()
        || plan.is::<LocalLimitExec>();
    passes && plan.children().into_iter().any(passes_on_an_empty_batch)
}
