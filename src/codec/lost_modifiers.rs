//! Modifiers DataFusion 55's plan encoding drops but the decoded plan still tells, put back
//! after each decode (as function results' field metadata are, `field_metadata`).
//!
//! * A window function the planner reversed (to read an input sorted the other way): the
//!   encoding keeps the reversed function (`last_value` for `first_value`) but not the flag
//!   telling its evaluator so (`nth_value` then counts from the wrong end). The expression's
//!   name is the logical expression as written, so its ORDER BY running against the one the
//!   node has means the planner reversed it.
//! * `IGNORE NULLS` of a window function (`lag`, `first_value`, ...): not encoded for them
//!   (only for window aggregates), but the name says it.
//! * `GROUPING SETS (())`: grouping sets are encoded as one flag per column and set, so a set
//!   of no columns is nothing, and the decoded aggregate has no set at all (no row out). An
//!   aggregate with grouping sets but no sets at all can only come from that.
//!
//! Upstream: datafusion-proto 55.2.0 `serialize_physical_window_expr` ("WindowUDFExpr doesn't
//! have ignore_nulls"), datafusion-physical-plan 55.2.0 `AggregateExec`'s `groups` decoding.
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::logical_expr::ReversedUDWF;
use datafusion::physical_expr::window::{StandardWindowExpr, WindowExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, PhysicalGroupBy};
use datafusion::physical_plan::windows::{
    create_udwf_window_expr, BoundedWindowAggExec, WindowAggExec, WindowUDFExpr,
};
use datafusion::physical_plan::ExecutionPlan;

const IGNORE_NULLS: &str = " IGNORE NULLS";

/// `plan` with the modifiers of the module's list given back.
pub fn restore_lost_modifiers(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let restored = plan.transform_up(|node| {
        let rebuilt = match node.downcast_ref::<AggregateExec>() {
            Some(a) => repaired_grouping(a)?,
            None => with_windows_repaired(&node, |expr, schema| repaired_window(expr, schema))?,
        };
        Ok(match rebuilt {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(node),
        })
    })?;
    Ok(restored.data)
}

/// A window node (`BoundedWindowAggExec`, `WindowAggExec`) built again with the expressions
/// `repair` gives (given each expression and the node's input schema; None: unchanged), if
/// it changed one; None for other nodes.
pub fn with_windows_repaired(
    node: &Arc<dyn ExecutionPlan>,
    repair: impl Fn(&dyn WindowExpr, &Schema) -> Result<Option<Arc<dyn WindowExpr>>>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let repaired = |exprs: &[Arc<dyn WindowExpr>], input: &Arc<dyn ExecutionPlan>| {
        let schema = input.schema();
        let mut changed = false;
        let mut out = Vec::with_capacity(exprs.len());
        for expr in exprs {
            let fixed = repair(expr.as_ref(), &schema)?;
            changed |= fixed.is_some();
            out.push(fixed.unwrap_or_else(|| Arc::clone(expr)));
        }
        Ok::<_, datafusion::common::DataFusionError>(changed.then_some(out))
    };
    if let Some(w) = node.downcast_ref::<BoundedWindowAggExec>() {
        let Some(exprs) = repaired(w.window_expr(), w.input())? else {
            return Ok(None);
        };
        // `can_repartition` as the decoder recovers it: from the partition keys.
        let can_repartition = !w.partition_keys().is_empty();
        let rebuilt = BoundedWindowAggExec::try_new(
            exprs,
            Arc::clone(w.input()),
            w.input_order_mode.clone(),
            can_repartition,
        )?;
        return Ok(Some(Arc::new(rebuilt)));
    }
    if let Some(w) = node.downcast_ref::<WindowAggExec>() {
        let Some(exprs) = repaired(w.window_expr(), w.input())? else {
            return Ok(None);
        };
        let can_repartition = !w.partition_keys().is_empty();
        let rebuilt = WindowAggExec::try_new(exprs, Arc::clone(w.input()), can_repartition)?;
        return Ok(Some(Arc::new(rebuilt)));
    }
    Ok(None)
}

fn repaired_grouping(a: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let group = a.group_expr();
    if !(group.has_grouping_set() && group.expr().is_empty() && group.groups().is_empty()) {
        return Ok(None);
    }
    let group = PhysicalGroupBy::new(vec![], vec![], vec![vec![]], true);
    let rebuilt = AggregateExec::try_new(
        *a.mode(),
        group,
        a.aggr_expr().to_vec(),
        a.filter_expr().to_vec(),
        Arc::clone(a.input()),
        a.input_schema(),
    )?
    .with_limit_options(a.limit_options());
    Ok(Some(Arc::new(rebuilt)))
}

fn repaired_window(expr: &dyn WindowExpr, schema: &Schema) -> Result<Option<Arc<dyn WindowExpr>>> {
    let Some(standard) = expr.as_any().downcast_ref::<StandardWindowExpr>() else {
        return Ok(None);
    };
    let Some(udf) = standard
        .get_standard_func_expr()
        .as_any()
        .downcast_ref::<WindowUDFExpr>()
    else {
        return Ok(None);
    };
    let reversed = window_direction(expr) == Some(true);
    let ignore_nulls = names_ignore_nulls(expr.name());
    if !reversed && !ignore_nulls {
        return Ok(None);
    }
    // A reversed expression holds the reversed function: build the one written, then reverse
    // it as the planner did (which sets the evaluator's flag).
    let written = if reversed {
        match udf.fun().reverse_expr() {
            ReversedUDWF::Reversed(fun) => fun,
            ReversedUDWF::Identical => Arc::clone(udf.fun()),
            ReversedUDWF::NotSupported => return Ok(None),
        }
    } else {
        Arc::clone(udf.fun())
    };
    let name = expr.name().to_string();
    let mut fun = create_udwf_window_expr(&written, udf.args(), schema, name, ignore_nulls)?;
    if reversed {
        let Some(back) = fun.reverse_expr() else {
            return Ok(None);
        };
        fun = back;
    }
    Ok(Some(Arc::new(StandardWindowExpr::new(
        fun,
        expr.partition_by(),
        expr.order_by(),
        Arc::clone(expr.get_window_frame()),
    ))))
}

/// Whether the planner reversed a window function: its ORDER BY runs against the one in its
/// name (the expression as written). None when the name's directions cannot be read.
pub fn window_direction(expr: &dyn WindowExpr) -> Option<bool> {
    let order_by = expr.order_by();
    if order_by.is_empty() {
        return Some(false);
    }
    let named: Vec<(bool, bool)> = expr
        .name()
        .split(" NULLS ")
        .collect::<Vec<_>>()
        .windows(2)
        .filter_map(|w| {
            let desc = if w[0].ends_with(" DESC") {
                true
            } else if w[0].ends_with(" ASC") {
                false
            } else {
                return None;
            };
            let nulls_first = w[1].starts_with("FIRST");
            (nulls_first || w[1].starts_with("LAST")).then_some((desc, nulls_first))
        })
        .collect();
    if named.len() < order_by.len() {
        return None;
    }
    let actual = order_by
        .iter()
        .map(|s| (s.options.descending, s.options.nulls_first));
    let written = &named[named.len() - order_by.len()..];
    if written.iter().copied().eq(actual.clone()) {
        Some(false)
    } else if written
        .iter()
        .map(|(desc, nulls_first)| (!desc, !nulls_first))
        .eq(actual)
    {
        Some(true)
    } else {
        None
    }
}

/// Whether a window expression's name (the logical expression's display) has `IGNORE NULLS`
/// right after the function's call, not inside its arguments (a string literal, say).
pub fn names_ignore_nulls(name: &str) -> bool {
    let Some(open) = name.find('(') else {
        return false;
    };
    let (mut depth, mut quoted) = (0usize, false);
    for (i, c) in name[open..].char_indices() {
        match c {
            '"' | '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => {
                depth -= 1;
                if depth == 0 {
                    return name[open + i + 1..].starts_with(IGNORE_NULLS);
                }
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::codec::test_support::{physical, round_trip, rows};

    /// The rows of `sql` single-node, and after its plan's round trip through the encoding
    /// with and without the repair.
    async fn answers(sql: &str) -> (String, String, String) {
        let ctx = SessionContext::new();
        ctx.sql(
            "CREATE TABLE t (id INT, a INT) AS VALUES (1, NULL), (2, 5), (3, NULL), (4, 7), \
             (5, 9), (6, NULL)",
        )
        .await
        .unwrap();
        let plan = physical(&ctx, sql).await;
        let decoded = round_trip(Arc::clone(&plan), &ctx.task_ctx());
        let repaired = restore_lost_modifiers(Arc::clone(&decoded)).unwrap();
        (
            rows(plan, ctx.task_ctx()).await,
            rows(decoded, ctx.task_ctx()).await,
            rows(repaired, ctx.task_ctx()).await,
        )
    }

    #[tokio::test]
    async fn modifiers_come_back_after_the_round_trip() {
        // (query, whether the plain round trip answers otherwise)
        for (sql, lost) in [
            (
                "SELECT id, lag(a) IGNORE NULLS OVER (ORDER BY id) AS l FROM t ORDER BY id",
                true,
            ),
            (
                "SELECT id, first_value(a) IGNORE NULLS OVER (ORDER BY id DESC) AS f FROM t \
                 ORDER BY id",
                true,
            ),
            (
                "SELECT id, nth_value(a, 2) OVER (ORDER BY id DESC) AS n, \
                 nth_value(a, 2) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 3 FOLLOWING) \
                 AS m FROM t ORDER BY id",
                true,
            ),
            // Reversed, but `last_value` needs no flag to stand for `first_value`.
            (
                "SELECT id, first_value(id) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND 2 \
                 FOLLOWING) AS f, first_value(id) OVER (ORDER BY id DESC ROWS BETWEEN 1 \
                 PRECEDING AND 2 FOLLOWING) AS g FROM t ORDER BY id",
                false,
            ),
            ("SELECT count(*) FROM t GROUP BY GROUPING SETS (())", true),
            (
                "SELECT count(*) FROM t WHERE false GROUP BY GROUPING SETS (())",
                true,
            ),
        ] {
            let (single, decoded, repaired) = answers(sql).await;
            assert_eq!(repaired, single, "{sql}");
            assert_eq!(decoded != single, lost, "{sql}");
        }
    }

    #[test]
    fn ignore_nulls_is_read_after_the_call_only() {
        assert!(names_ignore_nulls(
            "lag(t.a) IGNORE NULLS ORDER BY [t.id ASC NULLS LAST]"
        ));
        assert!(!names_ignore_nulls(
            "lag(Utf8(\"x) IGNORE NULLS\")) ORDER BY [t.id ASC]"
        ));
        assert!(!names_ignore_nulls(
            "lag(t.a) ORDER BY [t.id ASC NULLS LAST]"
        ));
    }
}
