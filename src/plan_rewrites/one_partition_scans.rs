//! Scans DataFusion planned as one partition, merged again when they are split into tasks.
//!
//! Over a scan of one partition, DataFusion leaves out what a single partition makes
//! needless: a LIMIT is pushed into the scan with no limit above it, a sort or window reads
//! the scan with no merge in between, an ordering is taken as given. datafusion-distributed
//! splits a scan into tasks by its size, and each task then limits, sorts or windows its own
//! share (a `LIMIT 1` gave one row per task; `ORDER BY c LIMIT 1` one row per task). So such a
//! scan, when it will be split and what reads it needs its rows together, gets the merge
//! a plan of several partitions would have had (carrying its limit and ordering): the
//! distributed planner cuts a stage there, and the tasks' rows meet again before they are
//! limited, sorted or windowed. Scans DataFusion already split, and scans of one task, are
//! left as they are.
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_distributed::DistributedConfig;

use crate::scan_tasks;

/// `plan` with a merge above each one-partition scan that will be split and is read as one.
pub fn merge_split_scans(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    // The result's own order counts too: a sorted scan may be the whole answer to ORDER BY.
    let ordered = plan.output_ordering().is_some();
    merge(plan, ordered, config)
}

/// `node`, where `read_as_one` says whether what reads it (when it has one partition) relies
/// on that partition holding all of its rows.
fn merge(
    node: Arc<dyn ExecutionPlan>,
    read_as_one: bool,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    let one = node.output_partitioning().partition_count() == 1;
    if node.children().is_empty() {
        let needs_merge = one && (read_as_one || node.fetch().is_some());
        return match needs_merge && split_into_tasks(&node, config) {
            true => Ok(merged(node)),
            false => Ok(node),
        };
    }
    let requires_order = node
        .required_input_ordering()
        .iter()
        .any(|ordering| ordering.is_some());
    let children = node
        .children()
        .into_iter()
        .enumerate()
        .map(|(i, child)| {
            let child_read_as_one = match reads(node.as_ref(), i) {
                Reads::AnyPartitions => false,
                Reads::Passing if !requires_order => one && read_as_one,
                Reads::Passing | Reads::AsOne => true,
            };
            merge(Arc::clone(child), child_read_as_one, config)
        })
        .collect::<Result<Vec<_>>>()?;
    replace_children_if_necessary(node, children)
}

/// How an operator reads one of its inputs.
enum Reads {
    /// As any number of partitions: merges, repartitions, and the build side of a collected
    /// join (which the distributed planner broadcasts or keeps in one task).
    AnyPartitions,
    /// Partition by partition, so that what matters is how its own output is read: operators
    /// that take rows one by one, partial aggregates, sorts within partitions, a join's probe.
    Passing,
    /// As a whole: sorts, limits, final aggregates, windows...
    AsOne,
}

fn reads(node: &dyn ExecutionPlan, child: usize) -> Reads {
    if node.is::<CoalescePartitionsExec>()
        || node.is::<SortPreservingMergeExec>()
        || node.is::<RepartitionExec>()
    {
        return Reads::AnyPartitions;
    }
    let collected_join = node
        .downcast_ref::<HashJoinExec>()
        .is_some_and(|j| *j.partition_mode() == PartitionMode::CollectLeft)
        || node.is::<NestedLoopJoinExec>()
        || node.is::<CrossJoinExec>();
    if collected_join {
        return match child {
            0 => Reads::AnyPartitions,
            _ => Reads::Passing,
        };
    }
    let row_by_row = node.fetch().is_none()
        && (node.is::<ProjectionExec>() || node.is::<FilterExec>() || node.is::<CooperativeExec>());
    let partial_aggregate = node.downcast_ref::<AggregateExec>().is_some_and(|a| {
        matches!(
            a.mode(),
            AggregateMode::Partial | AggregateMode::PartialReduce
        )
    });
    let sort_within_partitions = node
        .downcast_ref::<SortExec>()
        .is_some_and(|s| s.preserve_partitioning());
    match row_by_row || partial_aggregate || sort_within_partitions {
        true => Reads::Passing,
        false => Reads::AsOne,
    }
}

/// `scan` under the merge a multi-partition plan would have had: ordered when the scan is,
/// with the scan's limit.
fn merged(scan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    let fetch = scan.fetch();
    match scan.output_ordering().cloned() {
        Some(ordering) => Arc::new(SortPreservingMergeExec::new(ordering, scan).with_fetch(fetch)),
        None => Arc::new(CoalescePartitionsExec::new(scan).with_fetch(fetch)),
    }
}

/// Whether the distributed planner may give `scan` more than one task: the rule of
/// datafusion-distributed's file scans (and ours for memory scans), before the cap by workers;
/// with `dynamic_task_count`, any scan may be.
fn split_into_tasks(scan: &Arc<dyn ExecutionPlan>, config: &ConfigOptions) -> bool {
    let Some(d_cfg) = config.extensions.get::<DistributedConfig>() else {
        return false;
    };
    if d_cfg.max_tasks_per_stage == 1 {
        return false;
    }
    if d_cfg.dynamic_task_count {
        return true; // sized while it runs, from what it reads: it may be split
    }
    scan_tasks::task_count(scan, config).unwrap_or(1) > 1
}
