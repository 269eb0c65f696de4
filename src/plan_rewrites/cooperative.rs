//! Makes dropped queries stop promptly on every task.
//!
//! A query is cancelled by dropping its streams, which only takes effect when the task polling
//! them yields. Joins can emit many batches per input batch without touching a Tokio resource,
//! so a join feeding an aggregate can run for minutes inside a single `poll_next` and ignore
//! Ctrl-C. DataFusion's own `EnsureCooperative` rule only guards leaves; we also put a
//! [`CooperativeExec`] (one unit of Tokio budget per batch) above every operator whose output can
//! outgrow its input. It is done before distribution, so workers run the same plan shape that
//! the coordinator uses to read their metrics.
//!
//! Upstream: DataFusion 55's `EnsureCooperative` (datafusion-physical-optimizer
//! `src/ensure_coop.rs`) wraps leaves only.
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PiecewiseMergeJoinExec, SortMergeJoinExec,
    SymmetricHashJoinExec,
};
use datafusion::physical_plan::unnest::UnnestExec;
use datafusion::physical_plan::ExecutionPlan;

/// Plan nodes a path from the root may have once wrapped. Plans travel as protobuf, which
/// decodes at most 100 nested messages (prost's limit; two per plan node, more for
/// expressions): a wrapper that would take a path past this is left out, the upper ones first
/// kept (TPC-DS q64 has fifteen joins on one path).
const MAX_DEPTH: usize = 40;

/// `plan` with a [`CooperativeExec`] above each join and unnest, as depth allows.
pub fn yield_after_amplifiers(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    wrap(plan, 0)
}

/// `node` (with `above` nodes above it) with wrappers above its amplifiers, those that keep
/// every path within [`MAX_DEPTH`].
fn wrap(node: Arc<dyn ExecutionPlan>, above: usize) -> Result<Arc<dyn ExecutionPlan>> {
    let here = amplifies(node.as_ref()) && above + 1 + height(node.as_ref()) <= MAX_DEPTH;
    let below = above + 1 + usize::from(here);
    let children = node.children().into_iter().cloned().collect::<Vec<_>>();
    let node = match children.is_empty() {
        true => node,
        false => {
            let wrapped = children
                .into_iter()
                .map(|c| wrap(c, below))
                .collect::<Result<Vec<_>>>()?;
            replace_children_if_necessary(node, wrapped)?
        }
    };
    Ok(match here {
        true => Arc::new(CooperativeExec::new(node)),
        false => node,
    })
}

/// Nodes on the longest path from `node` down to a leaf.
fn height(node: &dyn ExecutionPlan) -> usize {
    1 + node
        .children()
        .iter()
        .map(|c| height(c.as_ref()))
        .max()
        .unwrap_or(0)
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
