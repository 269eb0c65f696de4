//! Top-N per group (`ROW_NUMBER() OVER (PARTITION BY ..) <= K`, `RANK`, `QUALIFY`) as
//! DataFusion plans it under `datafusion.optimizer.enable_window_topn`, with its limit
//! applied before rows move between stages.
//!
//! datafusion-python cannot serialise the `PartitionedTopKExec` that setting plans, so the
//! query comes planned without it (`context.py`) and DataFusion's own rule runs here on the
//! decoded plan. DataFusion runs that rule before sorts are placed; here the window's input
//! is already sorted, so the sort the heap replaces goes. Each task then keeps only its top K
//! of each group before the hash shuffle, and the heap above the shuffle picks the final K:
//! a row of a group's top K is in the top K of the part of the group one task sees (fewer
//! rows can only rank it higher), for `ROW_NUMBER` and, ties kept, for `RANK`.
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::window_topn::WindowTopN;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::partitioned_topk::PartitionedTopKExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::BoundedWindowAggExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

/// `plan` with each filter over a window that selects columns (DataFusion's projection
/// pushdown, which runs after its top-N rule, put them there) split into a filter and a
/// projection above it: the form the rule knows.
fn unproject_window_filters(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let split = plan.transform_up(|node| {
        let Some(filter) = node.downcast_ref::<FilterExec>() else {
            return Ok(Transformed::no(node));
        };
        let (Some(columns), true) = (filter.projection(), over_a_window(filter.input())) else {
            return Ok(Transformed::no(node));
        };
        let whole = Arc::new(
            FilterExecBuilder::from(filter)
                .apply_projection(None)?
                .build()?,
        );
        let schema = whole.schema();
        let exprs = columns.iter().map(|&i| {
            let name = schema.field(i).name().clone();
            (
                Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
                name,
            )
        });
        Ok(Transformed::yes(
            Arc::new(ProjectionExec::try_new(exprs, whole)?) as _,
        ))
    })?;
    Ok(split.data)
}

/// Whether `plan` is a window aggregate, under projections and repartitions at most.
fn over_a_window(plan: &Arc<dyn ExecutionPlan>) -> bool {
    if plan.is::<BoundedWindowAggExec>() {
        return true;
    }
    (plan.is::<ProjectionExec>() || plan.is::<RepartitionExec>())
        && plan.children().first().is_some_and(|c| over_a_window(c))
}

/// `plan` with each top-N per group DataFusion's rule finds made a heap, and a heap per task
/// below the shuffle that gathers each group (when the setting is on).
pub fn plan_window_topn(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    if !config.optimizer.enable_window_topn {
        return Ok(plan);
    }
    let plan = WindowTopN::new().optimize(unproject_window_filters(plan)?, config)?;
    let rewritten = plan.transform_up(|node| {
        let Some(topk) = node.downcast_ref::<PartitionedTopKExec>() else {
            return Ok(Transformed::no(node));
        };
        let like = |input: Arc<dyn ExecutionPlan>| -> Result<Arc<dyn ExecutionPlan>> {
            let made = PartitionedTopKExec::try_new(
                input,
                topk.expr().clone(),
                topk.partition_prefix_len(),
                topk.fetch(),
                topk.fn_kind(),
            )?;
            Ok(Arc::new(made))
        };
        let mut input = Arc::clone(topk.input());
        // The heap sorts what it keeps: a sort of each partition below it is redundant.
        if let Some(sort) = input.downcast_ref::<SortExec>() {
            let per_partition = sort.preserve_partitioning()
                || sort.input().output_partitioning().partition_count() == 1;
            if sort.fetch().is_none() && per_partition {
                input = Arc::clone(sort.input());
            }
        }
        let shuffled = input
            .downcast_ref::<RepartitionExec>()
            .filter(|s| matches!(s.partitioning(), Partitioning::Hash(..)))
            .map(|s| Arc::clone(s.input()));
        if let Some(shuffled) = shuffled {
            input = replace_children_if_necessary(input, vec![like(shuffled)?])?;
        }
        Ok(Transformed::yes(like(input)?))
    })?;
    Ok(rewritten.data)
}
