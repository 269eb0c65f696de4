//! `FILTER (WHERE ...)` of window aggregates, which DataFusion 55's plan encoding drops (and
//! which, unlike the other modifiers, the decoded plan cannot tell: the expression's name
//! shows the filter's text only).
//!
//! From datafusion-python the filters come beside the plan, as the logical window expressions
//! that have one (`Expr.to_bytes()` carries it), keyed by the name the physical expression
//! gets (`from_logical`). Each window given its filters is wrapped in a [`WindowFilters`]
//! node holding them as logical expressions (no table qualifiers): wherever the plan is
//! encoded the node travels with them, and decoding it plans them again against the window's
//! input and gives them back. A window aggregate whose name shows a filter no such node holds
//! is refused (`checks::lost_in_transit`, through `filtered_windows`).
//!
//! Upstream: datafusion-proto 55.2.0 `serialize_physical_window_expr` (no filter).
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_datafusion_err, Column, DFSchema, Result};
use datafusion::execution::context::ExecutionProps;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::window::{
    PlainAggregateWindowExpr, SlidingAggregateWindowExpr, WindowExpr,
};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::Serializeable;

use super::lost_modifiers::with_windows_repaired;
use crate::operators::WindowFilters;
use crate::plan_nodes::only;

const TAG: &[u8] = b"dfdpy.window-filters";

/// `expr` (a window aggregate) with `filter`; None for other window expressions.
fn with_filter(
    expr: &dyn WindowExpr,
    filter: Arc<dyn PhysicalExpr>,
) -> Option<Arc<dyn WindowExpr>> {
    let any = expr.as_any();
    let (partition_by, order_by) = (expr.partition_by(), expr.order_by());
    let frame = Arc::clone(expr.get_window_frame());
    if let Some(e) = any.downcast_ref::<PlainAggregateWindowExpr>() {
        let aggregate = Arc::new(e.get_aggregate_expr().clone());
        let plain =
            PlainAggregateWindowExpr::new(aggregate, partition_by, order_by, frame, Some(filter));
        return Some(Arc::new(plain));
    }
    let e = any.downcast_ref::<SlidingAggregateWindowExpr>()?;
    let aggregate = Arc::new(e.get_aggregate_expr().clone());
    let sliding =
        SlidingAggregateWindowExpr::new(aggregate, partition_by, order_by, frame, Some(filter));
    Some(Arc::new(sliding))
}

/// `node` (a window node) with the filters of `filters` its aggregates are named by, planned
/// against its input; None when none of its expressions is named.
fn give_filters(
    node: &Arc<dyn ExecutionPlan>,
    filters: &HashMap<String, Expr>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    with_windows_repaired(node, |expr, schema: &Schema| {
        let Some(filter) = filters.get(expr.name()) else {
            return Ok(None);
        };
        let schema = DFSchema::try_from(schema.clone())?;
        let planning = Default::default();
        let planned = create_physical_expr(filter, &schema, &ExecutionProps::new(), &planning)?;
        Ok(with_filter(expr, planned))
    })
}

/// `node` given its filters and wrapped in the node that carries them.
fn wrapped(
    node: &Arc<dyn ExecutionPlan>,
    filters: &HashMap<String, Expr>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(given) = give_filters(node, filters)? else {
        return Ok(None);
    };
    let exprs = super::window_exprs(given.as_ref()).unwrap_or_default();
    let mut held = Vec::new();
    for expr in exprs {
        if let Some(filter) = filters.get(expr.name()) {
            held.push((expr.name().to_string(), filter.to_bytes()?.to_vec()));
        }
    }
    Ok(Some(Arc::new(WindowFilters::new(given, held))))
}

/// `plan` (decoded from datafusion-python's bytes) with the filters of `window_exprs` (the
/// logical window expressions that have one, `Expr.to_bytes()`), decoded with `ctx`'s
/// functions.
pub fn from_logical(
    plan: Arc<dyn ExecutionPlan>,
    window_exprs: &[Vec<u8>],
    ctx: &TaskContext,
) -> Result<Arc<dyn ExecutionPlan>> {
    if window_exprs.is_empty() {
        return Ok(plan);
    }
    let mut filters = HashMap::new();
    for bytes in window_exprs {
        // The optimiser aliases a window expression to its name as written (before type
        // coercion changed it): the physical expression is named so.
        let (name, expr) = match Expr::from_bytes_with_ctx(bytes, ctx)? {
            Expr::Alias(alias) => (alias.name, *alias.expr),
            other => {
                let name = other.schema_name().to_string();
                (name, other)
            }
        };
        let Expr::WindowFunction(window) = &expr else {
            continue;
        };
        if let Some(filter) = &window.params.filter {
            filters.insert(name, unqualified(filter)?);
        }
    }
    let given = plan.transform_up(|node| {
        Ok(match wrapped(&node, &filters)? {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(node),
        })
    })?;
    Ok(given.data)
}

/// `expr` with its columns named as the physical plan names them (no table qualifier).
fn unqualified(expr: &Expr) -> Result<Expr> {
    Ok(expr
        .clone()
        .transform_up(|e| match e {
            Expr::Column(c) if c.relation.is_some() => Ok(Transformed::yes(Expr::Column(
                Column::new_unqualified(c.name),
            ))),
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// The names of the window expressions whose filters `plan` carries.
pub fn filtered_windows(plan: &Arc<dyn ExecutionPlan>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let _ = plan.apply(|node| {
        if let Some(w) = node.downcast_ref::<WindowFilters>() {
            names.extend(w.filters().iter().map(|(name, _)| name.clone()));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names
}

/// Writes `node` if it is a [`WindowFilters`].
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let w = node.downcast_ref::<WindowFilters>()?;
    buf.extend_from_slice(TAG);
    Some(
        serde_json::to_writer(&mut *buf, w.filters())
            .map_err(|e| exec_datafusion_err!("writing window filters: {e}")),
    )
}

/// The window node (given its filters again, and wrapped) `buf` stands for, if it is one.
pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
    ctx: &TaskContext,
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let held = buf.strip_prefix(TAG)?;
    Some((|| {
        let input = only(inputs, "WindowFilters")?;
        let held: Vec<(String, Vec<u8>)> = serde_json::from_slice(held)
            .map_err(|e| exec_datafusion_err!("reading window filters: {e}"))?;
        let mut filters = HashMap::new();
        for (name, bytes) in held {
            filters.insert(name, Expr::from_bytes_with_ctx(&bytes, ctx)?);
        }
        wrapped(&input, &filters)?
            .ok_or_else(|| exec_datafusion_err!("window filters without their window"))
    })())
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::codec::test_support::{round_trip, rows};

    /// `plan` without its [`WindowFilters`] nodes.
    fn strip(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        plan.transform_up(|n| match n.downcast_ref::<WindowFilters>() {
            Some(w) => Ok(Transformed::yes(Arc::clone(w.children()[0]))),
            None => Ok(Transformed::no(n)),
        })
        .unwrap()
        .data
    }

    #[tokio::test]
    async fn filters_come_back_from_the_logical_plan_and_through_fragments() {
        let ctx = SessionContext::new();
        ctx.sql(
            "CREATE TABLE t (id INT, g VARCHAR, v INT) AS VALUES (1, 'a', 10), (2, 'b', 20), \
             (3, 'a', NULL), (4, 'b', 40)",
        )
        .await
        .unwrap();
        let sql = "SELECT id, sum(v) FILTER (WHERE g = 'a') OVER (ORDER BY id) AS s, \
                   count(*) FILTER (WHERE v > 15) OVER () AS c FROM t ORDER BY id";
        let df = ctx.sql(sql).await.unwrap();
        let logical = df.clone().into_optimized_plan().unwrap();
        let mut window_exprs = vec![];
        logical
            .apply(|node| {
                if let datafusion::logical_expr::LogicalPlan::Window(w) = node {
                    for e in &w.window_expr {
                        window_exprs.push(e.to_bytes().unwrap().to_vec());
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
        assert_eq!(window_exprs.len(), 2);
        let plan = df.create_physical_plan().await.unwrap();
        let task_ctx = ctx.task_ctx();
        let decoded = round_trip(Arc::clone(&plan), &task_ctx);
        let given = from_logical(decoded, &window_exprs, &task_ctx).unwrap();
        assert_eq!(filtered_windows(&given).len(), 2);
        // And again as a fragment: the filters travel in their node.
        let again = round_trip(Arc::clone(&given), &task_ctx);
        let single = rows(plan, ctx.task_ctx()).await;
        assert_eq!(rows(given, ctx.task_ctx()).await, single);
        assert_eq!(rows(Arc::clone(&again), ctx.task_ctx()).await, single);
        // Without them the answer changes.
        let lost = round_trip(strip(again), &task_ctx);
        assert_ne!(rows(lost, ctx.task_ctx()).await, single);
    }
}
