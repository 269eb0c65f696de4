//! Sorts below window operators that cover every PARTITION BY column.
//!
//! A window operator requires its input sorted on all its PARTITION BY columns. DataFusion may
//! sort on fewer when the input's equivalence properties imply the rest (TPC-DS q47/q57 sort
//! on 4 of 5 columns). Those properties do not survive the cut into stages: on a worker the
//! same sort sits above a network shuffle that implies nothing, and the window operator fails
//! (`All partition by columns should have an ordering`). Sorting on every PARTITION BY column
//! says explicitly what was implied, so the plan means the same wherever it runs.
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::codec::window_exprs;

/// `plan` with the sort under each window operator extended to all its PARTITION BY columns.
pub fn sort_all_partition_columns(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(exprs) = window_exprs(node.as_ref()) else {
            return Ok(Transformed::no(node));
        };
        let Some(sort) = node.children()[0].downcast_ref::<SortExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(partition_by) = exprs.first().map(|e| e.partition_by()) else {
            return Ok(Transformed::no(node));
        };
        let existing: Vec<PhysicalSortExpr> = sort.expr().iter().cloned().collect();
        let missing: Vec<PhysicalSortExpr> = partition_by
            .iter()
            .filter(|p| !existing.iter().any(|s| s.expr.eq(*p)))
            .map(|p| PhysicalSortExpr::new_default(Arc::clone(p)))
            .collect();
        if missing.is_empty() {
            return Ok(Transformed::no(node));
        }
        // Partition columns first (in any order), then the window's ORDER BY keys.
        let prefix = existing
            .iter()
            .take_while(|s| partition_by.iter().any(|p| s.expr.eq(p)))
            .count();
        let mut ordering = existing[..prefix].to_vec();
        ordering.extend(missing);
        ordering.extend_from_slice(&existing[prefix..]);
        let Some(ordering) = LexOrdering::new(ordering) else {
            return Ok(Transformed::no(node));
        };
        let new_sort = SortExec::new(ordering, Arc::clone(sort.input()))
            .with_preserve_partitioning(sort.preserve_partitioning())
            .with_fetch(sort.fetch());
        let rebuilt = replace_children_if_necessary(Arc::clone(&node), vec![Arc::new(new_sort)])?;
        Ok(Transformed::yes(rebuilt))
    })
    .map(|t| t.data)
}
