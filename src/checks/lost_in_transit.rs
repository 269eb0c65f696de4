//! What DataFusion 55's physical-plan serialisation drops without an error, found before a
//! plan is distributed, so such a query runs single-node (the caller's fallback) instead of
//! giving wrong rows.
//!
//! datafusion-proto 55 writes no `FILTER (WHERE ...)` of a window aggregate, no `IGNORE NULLS`
//! of a window function (`lag`, `first_value`, ...), nothing of a window function the planner
//! reversed (to read an input sorted the other way), and no grouping set that has no columns
//! (`GROUP BY GROUPING SETS (())`). The plan datafusion-python hands us has already lost them,
//! and every hop to a worker would lose them again. A window expression's name still says what
//! was written (it is the logical expression's display), and grouping sets over no column are
//! recognised by their shape: both are checked here.
//!
//! Upstream: datafusion-proto 55 `src/physical_plan/to_proto.rs`
//! (`serialize_physical_window_expr` and the aggregate's grouping sets).
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_expr::window::{
    PlainAggregateWindowExpr, SlidingAggregateWindowExpr, StandardWindowExpr, WindowExpr,
};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::ExecutionPlan;

use crate::codec::window_exprs;
use crate::errors::not_distributable;

const IGNORE_NULLS: &str = " IGNORE NULLS";
const FILTER: &str = " FILTER (WHERE ";

/// Fails (as not distributable, naming what) when `plan` lost a modifier in serialisation.
pub fn check_nothing_lost(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    let mut lost = None;
    plan.apply(|node| {
        lost = lost_in_window(node.as_ref())
            .or_else(|| lost_in_grouping(node.as_ref()))
            .or_else(|| lost_in_types(node.as_ref()));
        Ok(match lost {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match lost {
        Some(what) => Err(not_distributable(format!(
            "{what}, which DataFusion 55 cannot send to workers (its plan serialisation drops it)"
        ))),
        None => Ok(()),
    }
}

fn lost_in_window(node: &dyn ExecutionPlan) -> Option<String> {
    let exprs = window_exprs(node)?;
    exprs.iter().find_map(|expr| {
        let name = expr.name();
        let any = expr.as_any();
        // What a decoded expression can still carry: the protobuf has an `ignore_nulls` for
        // window aggregates only, and no filter at all.
        let ignores_nulls = if let Some(e) = any.downcast_ref::<PlainAggregateWindowExpr>() {
            e.get_aggregate_expr().ignore_nulls()
        } else if let Some(e) = any.downcast_ref::<SlidingAggregateWindowExpr>() {
            e.get_aggregate_expr().ignore_nulls()
        } else {
            !any.is::<StandardWindowExpr>()
        };
        if any.is::<StandardWindowExpr>() && planned_in_reverse(expr.as_ref()) {
            Some(format!(
                "the window function `{name}` is planned to run over its input in reverse order"
            ))
        } else if name.contains(IGNORE_NULLS) && !ignores_nulls {
            Some(format!("the window function `{name}` uses IGNORE NULLS"))
        } else if name.contains(FILTER) {
            Some(format!(
                "the window function `{name}` uses FILTER (WHERE ...)"
            ))
        } else {
            None
        }
    })
}

/// Whether a window function was reversed by the planner (to read an input sorted the other
/// way): its ORDER BY runs against the one in its name. The protobuf does not carry the
/// reversal flag of `WindowUDFExpr` (`lag` then reads as `lead`, `nth_value` counts from the
/// other end). When the name's directions cannot be read, it is taken as reversed.
fn planned_in_reverse(expr: &dyn WindowExpr) -> bool {
    let order_by = expr.order_by();
    if order_by.is_empty() {
        return false;
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
        return true;
    }
    let actual = order_by
        .iter()
        .map(|s| (s.options.descending, s.options.nulls_first));
    !named[named.len() - order_by.len()..]
        .iter()
        .copied()
        .eq(actual)
}

/// An aggregate records the input types it was planned for; the decoded input yielding other
/// types means a value changed type on the way (a `Float16` literal is written as `Float32`),
/// and its accumulators would fail (or worse) on workers.
fn lost_in_types(node: &dyn ExecutionPlan) -> Option<String> {
    let agg = node.downcast_ref::<AggregateExec>()?;
    // A final aggregate records the input of its partial one, not its own.
    if !matches!(
        agg.mode(),
        AggregateMode::Partial | AggregateMode::Single | AggregateMode::SinglePartitioned
    ) {
        return None;
    }
    let (planned, actual) = (agg.input_schema(), agg.input().schema());
    planned
        .fields()
        .iter()
        .zip(actual.fields())
        .find(|(p, a)| p.data_type() != a.data_type())
        .map(|(p, a)| {
            format!(
                "the column {:?} is {} single-node but {} once serialised",
                p.name(),
                p.data_type(),
                a.data_type()
            )
        })
}

fn lost_in_grouping(node: &dyn ExecutionPlan) -> Option<String> {
    let group_by = node.downcast_ref::<AggregateExec>()?.group_expr();
    // The protobuf writes grouping sets as one flag per column and set: with no columns, it
    // writes nothing, and the decoded aggregate has no set at all (so it outputs no row).
    (group_by.has_grouping_set() && group_by.expr().is_empty())
        .then(|| "the query groups by an empty grouping set (GROUPING SETS (()))".to_string())
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    async fn plan(sql: &str) -> Arc<dyn ExecutionPlan> {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (id INT, a INT) AS VALUES (1, NULL), (2, 5), (3, NULL)")
            .await
            .unwrap();
        ctx.sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap()
    }

    async fn lost(sql: &str) -> Option<String> {
        check_nothing_lost(&plan(sql).await)
            .err()
            .map(|e| e.to_string())
    }

    #[tokio::test]
    async fn modifiers_serialisation_drops_are_found() {
        let ignore = lost("SELECT lag(a) IGNORE NULLS OVER (ORDER BY id) FROM t").await;
        assert!(ignore.unwrap().contains("IGNORE NULLS"));
        let filter = lost("SELECT sum(a) FILTER (WHERE a > 1) OVER (ORDER BY id) FROM t").await;
        assert!(filter.unwrap().contains("FILTER"));
        let empty = lost("SELECT count(*) FROM t GROUP BY GROUPING SETS (())").await;
        assert!(empty.unwrap().contains("GROUPING SETS"));
    }

    #[tokio::test]
    async fn plain_windows_and_groupings_pass() {
        for sql in [
            "SELECT lag(a) OVER (ORDER BY id), sum(a) OVER (PARTITION BY id) FROM t",
            "SELECT id, count(*) FROM t GROUP BY GROUPING SETS ((), (id))",
            "SELECT nth_value(a, 2) OVER (ORDER BY id DESC) FROM t",
        ] {
            assert_eq!(lost(sql).await, None, "{sql}");
        }
    }
}
