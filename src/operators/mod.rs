//! Our own plan nodes, one per file; how each travels to workers is `codec`'s business.
mod merge_task_partitions;
mod metadata_repair;
mod scan_compression;
mod sum_counts;
mod task_meter;
mod window_filters;

pub use merge_task_partitions::MergeTaskPartitions;
pub use metadata_repair::MetadataRepair;
pub use scan_compression::ScanCompression;
pub use sum_counts::{Staging, SumCounts};
pub use task_meter::TaskMeter;
pub use window_filters::WindowFilters;
