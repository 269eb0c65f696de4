//! Rewrites applied to every plan decoded from datafusion-python before it is distributed:
//! repairs of what DataFusion 55's serialisation loses, filters that must reach scans in
//! other stages, merges a one-partition scan needs once split into tasks, and cancellation
//! points.
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::ExecutionPlan;

mod cooperative;
mod generate_series;
mod lost_in_transit;
mod one_partition_scans;
mod scan_filters;
mod window_sorts;

pub use lost_in_transit::check_nothing_lost;

/// `plan` as the distributed planner should see it.
pub fn prepare(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = generate_series::repair_series_scans(plan)?;
    let plan = window_sorts::sort_all_partition_columns(plan)?;
    let plan = scan_filters::filter_scans_across_stages(plan, config)?;
    let plan = one_partition_scans::merge_split_scans(plan, config)?;
    cooperative::yield_after_amplifiers(plan)
}

/// The window expressions of `node`, if it is a window operator (either kind).
pub fn window_exprs(node: &dyn ExecutionPlan) -> Option<&[Arc<dyn WindowExpr>]> {
    if let Some(w) = node.downcast_ref::<WindowAggExec>() {
        Some(w.window_expr())
    } else {
        node.downcast_ref::<BoundedWindowAggExec>()
            .map(|w| w.window_expr())
    }
}
