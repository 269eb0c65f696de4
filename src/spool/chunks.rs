//! A leaf task's work in chunks: the same plan over successive slices of each of its file
//! groups, so that a task spools its output a chunk at a time and a lost worker costs only
//! the chunk it was computing.
//!
//! Chunk `c` keeps every file group of the task (the output keeps its partitioning) but reads
//! only slice `c` of each: a byte range of a Parquet file (a row group belongs to the range
//! holding its middle, so each is read by exactly one chunk), whole files otherwise. Output
//! partition `p` of the task is then chunk 0's partition `p`, then chunk 1's, ...: the same
//! rows, for plans made only of operators that work row by row or combine later (filters,
//! projections, repartitioning, partial aggregates) and promise no order.
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::datasource::listing::{FileRange, PartitionedFile};
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfig};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_distributed::{DistributedConfig, DistributedLeafExec};

/// Bytes of file a chunk reads, about: eight scan partitions' worth
/// (`file_scan_config_bytes_per_partition`, 1 MiB by default).
pub fn chunk_bytes(options: &ConfigOptions) -> u64 {
    let per_partition = options
        .extensions
        .get::<DistributedConfig>()
        .map_or(1 << 20, |c| c.file_scan_config_bytes_per_partition);
    8 * per_partition.max(1) as u64
}

/// A task's chunks at most (each has a fixed cost: a plan run, a file per partition).
const MAX_CHUNKS: u64 = 32;

/// Task `task`'s plan as successive chunks, or None when `plan` cannot be cut (an operator
/// whose output a chunk would change, an order to keep, not one file scan) or is one chunk.
pub fn chunks(
    plan: &Arc<dyn ExecutionPlan>,
    task: usize,
    chunk_bytes: u64,
) -> Option<Vec<Arc<dyn ExecutionPlan>>> {
    if plan.output_ordering().is_some() {
        return None;
    }
    let scan = the_scan(plan, task)?;
    let count = scan
        .file_groups
        .iter()
        .map(|g| bytes(g.files()).div_ceil(chunk_bytes.max(1)))
        .max()?
        .min(MAX_CHUNKS);
    if count < 2 {
        return None;
    }
    let parquet = scan.file_source.file_type() == "parquet";
    (0..count as usize)
        .map(|c| {
            let mut slice = scan.clone();
            slice.file_groups = scan
                .file_groups
                .iter()
                .map(|g| FileGroup::new(slice_of(g.files(), c, count as usize, parquet)))
                .collect();
            with_scan(plan, task, DataSourceExec::from_data_source(slice)).ok()
        })
        .collect()
}

/// The one file scan of `plan` (task `task`'s variant of a split leaf) when every node
/// above it is one a chunk leaves correct.
fn the_scan(plan: &Arc<dyn ExecutionPlan>, task: usize) -> Option<FileScanConfig> {
    let mut scans = Vec::new();
    let mut cuttable = true;
    let _ = plan.apply(|node| {
        if let Some(scan) = file_scan_of(node, task) {
            scans.push(scan);
            return Ok(TreeNodeRecursion::Jump);
        }
        cuttable &= row_by_row(node);
        Ok(match cuttable {
            true => TreeNodeRecursion::Continue,
            false => TreeNodeRecursion::Stop,
        })
    });
    match (cuttable, scans.len()) {
        (true, 1) => scans.pop(),
        _ => None,
    }
}

/// Operators whose output over a file's rows is the union of their outputs over slices of it
/// (a partial aggregate's states are merged by its final step).
fn row_by_row(node: &Arc<dyn ExecutionPlan>) -> bool {
    if let Some(agg) = node.downcast_ref::<AggregateExec>() {
        return *agg.mode() == AggregateMode::Partial && agg.limit_options().is_none();
    }
    node.is::<ProjectionExec>()
        || node.is::<FilterExec>()
        || node.is::<RepartitionExec>()
        || node.is::<CooperativeExec>()
}

fn file_scan_of(node: &Arc<dyn ExecutionPlan>, task: usize) -> Option<FileScanConfig> {
    let node = match node.downcast_ref::<DistributedLeafExec>() {
        Some(leaf) => leaf.variants().get(task)?,
        None => node,
    };
    let scan = node.downcast_ref::<DataSourceExec>()?.data_source();
    scan.downcast_ref::<FileScanConfig>().cloned()
}

/// `plan` with its scan (or split leaf) replaced by `scan`.
fn with_scan(
    plan: &Arc<dyn ExecutionPlan>,
    task: usize,
    scan: Arc<DataSourceExec>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let replaced = Arc::clone(plan).transform_down(|node| match file_scan_of(&node, task) {
        Some(_) => Ok(Transformed::new(
            scan.clone() as _,
            true,
            TreeNodeRecursion::Jump,
        )),
        None => Ok(Transformed::no(node)),
    })?;
    Ok(replaced.data)
}

fn bytes(files: &[PartitionedFile]) -> u64 {
    files.iter().map(|f| f.effective_size()).sum()
}

/// Slice `c` of `count` of a group's files: its bytes cut in equal ranges (Parquet), or its
/// files dealt by where their middle falls (formats read whole or from line ends).
fn slice_of(
    files: &[PartitionedFile],
    c: usize,
    count: usize,
    parquet: bool,
) -> Vec<PartitionedFile> {
    let total = bytes(files) as u128;
    let bound = |i: usize| (total * i as u128 / count as u128) as u64;
    let (from, to) = (bound(c), bound(c + 1));
    let mut out = Vec::new();
    let mut offset = 0u64;
    for file in files {
        let size = file.effective_size();
        let start = file.range.as_ref().map_or(0, |r| r.start as u64);
        let (here, next) = (offset, offset + size);
        offset = next;
        if !parquet {
            let middle = here + size / 2;
            if (from..to).contains(&middle) || (c + 1 == count && middle >= to) {
                out.push(file.clone());
            }
            continue;
        }
        let (lo, hi) = (here.max(from), next.min(to));
        if lo < hi {
            let mut piece = file.clone();
            piece.range = Some(FileRange {
                start: (start + lo - here) as i64,
                end: (start + hi - here) as i64,
            });
            out.push(piece);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::datasource::listing::PartitionedFile;

    fn file(name: &str, size: u64, range: Option<(i64, i64)>) -> PartitionedFile {
        let mut f = PartitionedFile::new(name, size);
        f.range = range.map(|(start, end)| FileRange { start, end });
        f
    }

    fn ranges(files: &[PartitionedFile]) -> Vec<(String, i64, i64)> {
        files
            .iter()
            .map(|f| {
                let r = f.range.as_ref().unwrap();
                (f.object_meta.location.to_string(), r.start, r.end)
            })
            .collect()
    }

    #[test]
    fn parquet_slices_cover_each_byte_once() {
        let group = [file("a", 100, Some((40, 100))), file("b", 50, None)];
        let slices: Vec<_> = (0..4).map(|c| slice_of(&group, c, 4, true)).collect();
        // 110 bytes in 4 slices: [0,27) [27,55) [55,82) [82,110) of a[40..100] then b.
        assert_eq!(ranges(&slices[0]), [("a".into(), 40, 67)]);
        assert_eq!(ranges(&slices[1]), [("a".into(), 67, 95)]);
        assert_eq!(
            ranges(&slices[2]),
            [("a".into(), 95, 100), ("b".into(), 0, 22)]
        );
        assert_eq!(ranges(&slices[3]), [("b".into(), 22, 50)]);
    }

    #[test]
    fn other_formats_deal_whole_files_once() {
        let group: Vec<_> = (0..5).map(|i| file(&format!("f{i}"), 10, None)).collect();
        let dealt: Vec<Vec<String>> = (0..3)
            .map(|c| {
                let files = slice_of(&group, c, 3, false);
                files
                    .iter()
                    .map(|f| f.object_meta.location.to_string())
                    .collect()
            })
            .collect();
        assert_eq!(dealt.concat(), ["f0", "f1", "f2", "f3", "f4"]);
        assert!(dealt.iter().all(|d| !d.is_empty()));
    }
}
