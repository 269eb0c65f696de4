//! In-memory tables (`from_pydict`, `from_arrow`, `register_record_batches`...) across tasks.
//!
//! Their batches travel inside the plan. datafusion-distributed only knows how to split file
//! scans, so without these handlers an in-memory table would be one task and its query would
//! often not be distributed at all. We size the stage by the table's bytes (like a file scan)
//! and deal its batches round-robin to the tasks, so each worker receives only its share.
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::Result;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedConfig, DistributedLeafExec,
    ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};

/// A memory scan we may split: no declared ordering (dealing batches would break it), no limit.
fn splittable(plan: &Arc<dyn ExecutionPlan>) -> Option<&MemorySourceConfig> {
    let dse: &DataSourceExec = plan.downcast_ref()?;
    let mem: &MemorySourceConfig = dse.data_source().downcast_ref()?;
    (mem.sort_information().is_empty() && dse.fetch().is_none()).then_some(mem)
}

pub fn desired_task_count(
    ev: DesiredTaskCountEvent,
) -> Option<Result<DesiredTaskCountEventResponse>> {
    let mem = splittable(ev.plan)?;
    let bytes: usize = mem
        .partitions()
        .iter()
        .flatten()
        .map(|b| b.get_array_memory_size())
        .sum();
    let per_partition = ev
        .session_config
        .options()
        .extensions
        .get::<DistributedConfig>()
        .map(|c| c.file_scan_config_bytes_per_partition)
        .unwrap_or(16 * 1024 * 1024)
        .max(1);
    let rows = mem
        .partitions()
        .iter()
        .flatten()
        .map(|b| b.num_rows())
        .sum::<usize>();
    let tasks = bytes
        .div_ceil(per_partition)
        .div_ceil(ev.session_config.target_partitions().max(1))
        .clamp(1, rows.max(1));
    Some(Ok(DesiredTaskCountEventResponse::desired(tasks)))
}

pub fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let mem = splittable(ev.plan)?;
    if ev.task_count <= 1 {
        return None;
    }
    let partitions_per_task = ev.plan.output_partitioning().partition_count().max(1);
    let groups = partitions_per_task * ev.task_count;
    // Slice big batches (zero-copy) so that every group can get a share.
    let batches: Vec<&RecordBatch> = mem.partitions().iter().flatten().collect();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let piece = rows.div_ceil(groups).max(1);
    let mut dealt = vec![Vec::new(); groups];
    let mut i = 0;
    for batch in batches {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let len = piece.min(batch.num_rows() - offset);
            dealt[i % groups].push(batch.slice(offset, len));
            offset += len;
            i += 1;
        }
    }
    let variants: Result<Vec<Arc<dyn ExecutionPlan>>> = dealt
        .chunks(partitions_per_task)
        .map(|parts| {
            let exec = MemorySourceConfig::try_new_exec(
                parts,
                mem.original_schema(),
                mem.projection().clone(),
            )?;
            Ok(exec as Arc<dyn ExecutionPlan>)
        })
        .collect();
    let leaf = variants.and_then(|v| DistributedLeafExec::try_new(Arc::clone(ev.plan), v));
    Some(leaf.map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))))
}
