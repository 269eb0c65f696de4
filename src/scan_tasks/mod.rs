//! How leaf scans become tasks: how many tasks a scan wants, and what each task reads.
//!
//! datafusion-distributed sizes and splits file scans itself. We answer first for the scans it
//! does not know (in-memory tables) and for those it would split where they cannot be split
//! (compressed files); every other scan is left to its handlers.
//!
//! Upstream: `tasks_for_bytes` copies datafusion-distributed 4.0.0's file-scan sizing rule
//! (`src/events/defaults/file_scan_config.rs`).
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedConfig, ScaleUpLeafNodeEvent,
    ScaleUpLeafNodeEventResponse,
};

mod compressed_files;
mod memory_tables;

/// The planner's handler for a leaf's task count (ours first, then the crate's).
pub fn desired_task_count(
    ev: DesiredTaskCountEvent,
) -> Option<Result<DesiredTaskCountEventResponse>> {
    let options = ev.session_config.options();
    let tasks = memory_tables::task_count(ev.plan, options)
        .or_else(|| compressed_files::task_count(ev.plan, options))
        .or_else(|| crate::kept::task_count(ev.plan))?;
    Some(Ok(DesiredTaskCountEventResponse::desired(tasks)))
}

/// The planner's handler that gives each task of a leaf's stage its own share.
pub fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    memory_tables::scale_up(ev)
        .or_else(|| compressed_files::scale_up(ev))
        .or_else(|| crate::kept::scale_up(ev))
}

/// The tasks `scan` will be split into without `dynamic_task_count`: ours, or the crate's rule
/// for file scans; `None` for a leaf neither sizes.
pub fn task_count(scan: &Arc<dyn ExecutionPlan>, options: &ConfigOptions) -> Option<usize> {
    memory_tables::task_count(scan, options)
        .or_else(|| compressed_files::task_count(scan, options))
        .or_else(|| crate::kept::task_count(scan))
        .or_else(|| {
            let files = file_scan(scan)?;
            Some(tasks_for_bytes(bytes_of(files), options))
        })
}

/// The tasks a scan of `bytes` gets, as datafusion-distributed sizes file scans: one partition
/// per `file_scan_config_bytes_per_partition`, `target_partitions` partitions per task.
pub fn tasks_for_bytes(bytes: usize, options: &ConfigOptions) -> usize {
    let per_partition = options
        .extensions
        .get::<DistributedConfig>()
        .map(|c| c.file_scan_config_bytes_per_partition)
        .unwrap_or(16 * 1024 * 1024)
        .max(1);
    bytes
        .div_ceil(per_partition)
        .div_ceil(options.execution.target_partitions.max(1))
}

fn file_scan(scan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    scan.downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref::<FileScanConfig>()
}

fn bytes_of(scan: &FileScanConfig) -> usize {
    let files = scan.file_groups.iter().flat_map(|group| group.files());
    files.map(|file| file.effective_size() as usize).sum()
}
