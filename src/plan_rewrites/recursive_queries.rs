//! A recursive query (`WITH RECURSIVE`) runs whole in one task: its recursive term reads the
//! work table the query refills in its own process at each round, and is executed again each
//! round, so no network boundary may cut it (a stage below it would be read once).
//!
//! Before distribution, each outermost `RecursiveQueryExec` is hidden in a leaf (`InOneTask`)
//! the distributed planner cannot look into (a leaf of unknown kind runs in one task); after it,
//! the leaf gives its query back (`reveal`), so fragments carry the query itself. What reads
//! its result (joins, aggregates, other tables) is distributed as usual.
use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};

/// `plan` with each outermost recursive query hidden in an [`InOneTask`] leaf.
pub fn hide_recursive_queries(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let hidden = plan.transform_down(|node| {
        if !node.is::<RecursiveQueryExec>() {
            return Ok(Transformed::no(node));
        }
        let leaf = Arc::new(InOneTask(node)) as Arc<dyn ExecutionPlan>;
        Ok(Transformed::new(leaf, true, TreeNodeRecursion::Jump))
    })?;
    Ok(hidden.data)
}

/// `plan` (distributed: through its stages) with the hidden queries back in place.
pub fn reveal(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let revealed = plan.transform_up(|node| match node.downcast_ref::<InOneTask>() {
        Some(leaf) => Ok(Transformed::yes(Arc::clone(&leaf.0))),
        None => Ok(Transformed::no(node)),
    })?;
    Ok(revealed.data)
}

/// A plan the distributed planner sees as a leaf (see the module).
#[derive(Debug)]
pub struct InOneTask(Arc<dyn ExecutionPlan>);

impl DisplayAs for InOneTask {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "InOneTask: {}", self.0.name())
    }
}

impl ExecutionPlan for InOneTask {
    crate::plan_nodes::leaf_node!("InOneTask");

    crate::plan_nodes::runs_as!(0);
}
