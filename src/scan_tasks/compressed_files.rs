//! Files that cannot be read from the middle — compressed files (gzip, bzip2, xz, zstd CSV and
//! NDJSON), Avro files (their blocks are found from the file's start): each read whole by one
//! task.
//!
//! DataFusion never splits such a file into byte ranges (`FileSource::repartitioned` checks),
//! but datafusion-distributed's file-scan handler repartitions file groups for its tasks
//! without that check, which gave tasks byte ranges of one gzip stream (and each task a whole
//! Avro file, read twice). Here such a scan wants no more tasks than it has files, and its
//! files are dealt whole.
//!
//! Upstream: datafusion-distributed 4.0.0 `src/events/defaults/file_scan_config.rs` calls
//! `FileGroupPartitioner` directly.
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_distributed::{
    DistributedLeafExec, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};

use super::{bytes_of, file_scan, tasks_for_bytes};

/// A scan of files read whole that the crate would split by bytes (one with a declared
/// partitioning it deals whole already).
fn compressed(plan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    let scan = file_scan(plan)?;
    let dealt_whole = scan.output_partitioning.is_some();
    let whole =
        scan.file_compression_type.is_compressed() || scan.file_source.file_type() == "avro";
    (whole && !dealt_whole).then_some(scan)
}

/// The crate's count for the scan's bytes, but no more tasks than files.
pub fn task_count(plan: &Arc<dyn ExecutionPlan>, options: &ConfigOptions) -> Option<usize> {
    let scan = compressed(plan)?;
    let files: usize = scan.file_groups.iter().map(|group| group.len()).sum();
    Some(tasks_for_bytes(bytes_of(scan), options).clamp(1, files.max(1)))
}

/// Each task gets the scan's partition count of groups, its files dealt round-robin (in their
/// order, so that a group of sorted files stays sorted); a task may get empty groups.
pub fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = compressed(ev.plan)?;
    let partitions = ev.plan.output_partitioning().partition_count().max(1);
    let tasks = ev.task_count.max(1);
    let files: Vec<&PartitionedFile> = scan.file_groups.iter().flat_map(|g| g.iter()).collect();
    let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); partitions * tasks];
    let count = groups.len();
    for (i, file) in files.into_iter().enumerate() {
        groups[i % count].push(file.clone());
    }
    let mut variants = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let mut share = scan.clone();
        // Group `g` goes to task `g % tasks`, so the files spread over tasks first.
        share.file_groups = (0..partitions)
            .map(|p| FileGroup::new(std::mem::take(&mut groups[p * tasks + task])))
            .collect();
        variants.push(DataSourceExec::from_data_source(share) as Arc<dyn ExecutionPlan>);
    }
    let leaf = DistributedLeafExec::try_new(Arc::clone(ev.plan), variants);
    Some(leaf.map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
    use datafusion::datasource::physical_plan::{CsvSource, FileScanConfigBuilder};
    use datafusion::execution::object_store::ObjectStoreUrl;
    use datafusion::prelude::SessionConfig;
    use datafusion_distributed::DistributedConfig;

    use super::*;

    /// A gzip CSV scan of `files` files of 1 MB each, in one group.
    fn gzip_scan(files: usize) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let group: Vec<_> = (0..files)
            .map(|i| PartitionedFile::new(format!("part-{i}.csv.gz"), 1 << 20))
            .collect();
        let config = FileScanConfigBuilder::new(
            ObjectStoreUrl::local_filesystem(),
            Arc::new(CsvSource::new(schema)),
        )
        .with_file_group(FileGroup::new(group))
        .with_file_compression_type(FileCompressionType::GZIP)
        .build();
        DataSourceExec::from_data_source(config)
    }

    fn tiny_partitions() -> SessionConfig {
        let mut config = SessionConfig::new().with_target_partitions(1);
        let mut distributed = DistributedConfig::default();
        distributed.file_scan_config_bytes_per_partition = 1;
        config.options_mut().extensions.insert(distributed);
        config
    }

    #[test]
    fn no_more_tasks_than_files() {
        let config = tiny_partitions();
        assert_eq!(task_count(&gzip_scan(3), config.options()), Some(3));
    }

    #[test]
    fn every_file_is_read_whole_by_one_task() -> Result<()> {
        let config = tiny_partitions();
        let plan = gzip_scan(5);
        let ev = ScaleUpLeafNodeEvent {
            plan: &plan,
            task_count: 2,
            session_config: &config,
        };
        let leaf = scale_up(ev).expect("a compressed scan")?.plan;
        let mut seen = Vec::new();
        let leaf: &DistributedLeafExec = leaf.downcast_ref().expect("a leaf of tasks");
        for variant in leaf.variants() {
            let scan = file_scan(variant).expect("each task scans files");
            for file in scan.file_groups.iter().flat_map(|g| g.iter()) {
                assert!(file.range.is_none(), "a byte range of a gzip file");
                seen.push(file.path().to_string());
            }
        }
        seen.sort();
        let expected: Vec<String> = (0..5).map(|i| format!("part-{i}.csv.gz")).collect();
        assert_eq!(seen, expected);
        Ok(())
    }
}
