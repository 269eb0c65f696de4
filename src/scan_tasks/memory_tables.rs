//! In-memory tables (`from_pydict`, `from_arrow`, `register_record_batches`...) across tasks.
//!
//! Their batches travel inside the plan. datafusion-distributed only knows how to split file
//! scans, so without these handlers an in-memory table would be one task and its query would
//! often not be distributed at all. We size the stage by the table's bytes (like a file scan)
//! and deal its batches round-robin to the tasks, so each worker receives only its share.
//!
//! Upstream: datafusion-distributed 4.0.0's `FileScanConfig` task-count rule
//! (`src/distributed_planner/`) is private, so `tasks_for_bytes` repeats it for memory scans;
//! delete both when the crate sizes and splits `MemorySourceConfig` scans itself.
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_distributed::{
    DistributedLeafExec, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};

use super::tasks_for_bytes;

/// A memory scan we may split: no declared ordering (dealing batches would break it), no limit.
fn splittable(plan: &Arc<dyn ExecutionPlan>) -> Option<&MemorySourceConfig> {
    let dse: &DataSourceExec = plan.downcast_ref()?;
    let mem: &MemorySourceConfig = dse.data_source().downcast_ref()?;
    (mem.sort_information().is_empty() && dse.fetch().is_none()).then_some(mem)
}

/// The tasks a splittable memory scan wants: those of a file scan of its batches' bytes, and
/// no more tasks than rows.
pub fn task_count(plan: &Arc<dyn ExecutionPlan>, options: &ConfigOptions) -> Option<usize> {
    let mem = splittable(plan)?;
    let batches = || mem.partitions().iter().flatten();
    let bytes: usize = batches().map(|b| b.get_array_memory_size()).sum();
    let rows: usize = batches().map(|b| b.num_rows()).sum();
    Some(tasks_for_bytes(bytes, options).clamp(1, rows.max(1)))
}

/// Deals `batches` round-robin into `groups` groups of about equal rows, slicing big batches
/// (zero-copy) so that every group can get a share.
fn deal(batches: &[&RecordBatch], groups: usize) -> Vec<Vec<RecordBatch>> {
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
    dealt
}

pub fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let mem = splittable(ev.plan)?;
    if ev.task_count <= 1 {
        return None;
    }
    let partitions_per_task = ev.plan.output_partitioning().partition_count().max(1);
    let groups = partitions_per_task * ev.task_count;
    let batches: Vec<&RecordBatch> = mem.partitions().iter().flatten().collect();
    let dealt = deal(&batches, groups);
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

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::SessionConfig;
    use datafusion_distributed::{DesiredTaskCountEvent, DistributedConfig, TaskCountAnnotation};

    use super::super::desired_task_count;

    use super::*;

    fn batch(values: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(values))]).unwrap()
    }

    fn values(groups: &[Vec<RecordBatch>]) -> Vec<Vec<i64>> {
        groups
            .iter()
            .map(|g| {
                g.iter()
                    .flat_map(|b| {
                        let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                        a.values().to_vec()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn deals_every_row_once_in_even_shares() {
        let (a, b) = (batch(0..10), batch(10..13));
        let dealt = deal(&[&a, &b], 4);
        let got = values(&dealt);
        let mut all: Vec<i64> = got.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, (0..13).collect::<Vec<_>>());
        assert!(got.iter().all(|g| !g.is_empty() && g.len() <= 4), "{got:?}");
    }

    #[test]
    fn fewer_rows_than_groups_leaves_some_groups_empty() {
        let a = batch(0..2);
        let got = values(&deal(&[&a], 3));
        assert_eq!(got, vec![vec![0], vec![1], vec![]]);
    }

    #[test]
    fn a_big_table_is_split_into_several_tasks() {
        let big = batch(0..200_000);
        let plan: Arc<dyn ExecutionPlan> =
            MemorySourceConfig::try_new_exec(&[vec![big]], big_schema(), None).unwrap();
        let mut config = SessionConfig::new().with_target_partitions(2);
        let mut distributed = DistributedConfig::default();
        distributed.file_scan_config_bytes_per_partition = 100_000;
        config.options_mut().extensions.insert(distributed);
        let ev = DesiredTaskCountEvent {
            plan: &plan,
            session_config: &config,
        };
        let Some(Ok(response)) = desired_task_count(ev) else {
            panic!("a memory scan gets a task count");
        };
        // 1.6 MB at 100 kB a partition, 2 partitions a task.
        let TaskCountAnnotation::Desired(tasks) = response.task_count else {
            panic!("a desired count, not a maximum");
        };
        assert!((8..=9).contains(&tasks), "{tasks}");

        let ev = ScaleUpLeafNodeEvent {
            plan: &plan,
            task_count: 3,
            session_config: &config,
        };
        let leaf = scale_up(ev).unwrap().unwrap().plan;
        assert!(leaf.is::<DistributedLeafExec>());
    }

    fn big_schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }
}
