//! Makes dropped queries stop promptly on every task.
//!
//! A query is cancelled by dropping its streams, which only takes effect when the task polling
//! them yields. Joins can emit many batches per input batch without touching a Tokio resource,
//! so a join feeding an aggregate can run for minutes inside a single `poll_next` and ignore
//! Ctrl-C. DataFusion's own `EnsureCooperative` rule only guards leaves; we also put a
//! [`CooperativeExec`] (one unit of Tokio budget per batch) above every operator whose output can
//! outgrow its input. It is done before distribution, so workers run the same plan shape that
//! the coordinator uses to read their metrics.
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PiecewiseMergeJoinExec, SortMergeJoinExec,
    SymmetricHashJoinExec,
};
use datafusion::physical_plan::unnest::UnnestExec;
use datafusion::physical_plan::ExecutionPlan;

/// `plan` with a [`CooperativeExec`] above each join and unnest.
pub fn yield_after_amplifiers(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if amplifies(node.as_ref()) {
            Ok(Transformed::yes(
                Arc::new(CooperativeExec::new(node)) as Arc<dyn ExecutionPlan>
            ))
        } else {
            Ok(Transformed::no(node))
        }
    })
    .map(|t| t.data)
}

/// Operators that may return more batches than they receive.
fn amplifies(node: &dyn ExecutionPlan) -> bool {
    node.is::<HashJoinExec>()
        || node.is::<NestedLoopJoinExec>()
        || node.is::<CrossJoinExec>()
        || node.is::<SortMergeJoinExec>()
        || node.is::<SymmetricHashJoinExec>()
        || node.is::<PiecewiseMergeJoinExec>()
        || node.is::<UnnestExec>()
}
