//! What DataFusion 55's physical-plan serialisation drops without an error and nothing can
//! give back, found before a plan is distributed, so such a query runs single-node (the
//! caller's fallback) instead of giving wrong rows.
//!
//! datafusion-proto 55 writes no `FILTER (WHERE ...)` of a window aggregate (its name shows
//! it; the expression is gone): one that did not come beside the plan
//! (`codec::restore_window_filters`) is refused; and a literal may change type (a `Float16` is written as a
//! `Float32`, which an aggregate planned for the other type finds). What the decoded plan still
//! tells — `IGNORE NULLS` of a window function, one the planner reversed, `GROUPING SETS (())`
//! — is given back after each decode (`codec::repair_decoded`); only a window function whose
//! name does not tell its direction is refused here.
//!
//! Upstream: datafusion-proto 55 `src/physical_plan/to_proto.rs`
//! (`serialize_physical_window_expr`).
use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_expr::window::{
    PlainAggregateWindowExpr, SlidingAggregateWindowExpr, StandardWindowExpr,
};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::ExecutionPlan;

use crate::codec::{filtered_windows, names_ignore_nulls, window_direction, window_exprs};
use crate::errors::not_distributable;

const IGNORE_NULLS: &str = " IGNORE NULLS";
const FILTER: &str = " FILTER (WHERE ";

/// Fails (as not distributable, naming what) when `plan` lost a modifier in serialisation.
pub fn check_nothing_lost(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    let mut lost = None;
    let filtered = filtered_windows(plan);
    plan.apply(|node| {
        lost = lost_in_window(node.as_ref(), &filtered).or_else(|| lost_in_types(node.as_ref()));
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

/// `filtered`: the window expressions whose filters the plan carries (`codec::filtered_windows`).
fn lost_in_window(node: &dyn ExecutionPlan, filtered: &BTreeSet<String>) -> Option<String> {
    let exprs = window_exprs(node)?;
    exprs.iter().find_map(|expr| {
        let name = expr.name();
        let any = expr.as_any();
        // What a decoded expression can still carry: the protobuf has an `ignore_nulls` for
        // window aggregates, and the repair after decoding (`codec::repair_decoded`) gives it
        // back to window functions (read from the name); a filter travels nowhere.
        let ignores_nulls = if let Some(e) = any.downcast_ref::<PlainAggregateWindowExpr>() {
            e.get_aggregate_expr().ignore_nulls()
        } else if let Some(e) = any.downcast_ref::<SlidingAggregateWindowExpr>() {
            e.get_aggregate_expr().ignore_nulls()
        } else {
            any.is::<StandardWindowExpr>() && names_ignore_nulls(name)
        };
        if any.is::<StandardWindowExpr>() && window_direction(expr.as_ref()).is_none() {
            Some(format!(
                "the window function `{name}` may be planned to run over its input in reverse \
                 order (its name does not tell)"
            ))
        } else if name.contains(IGNORE_NULLS) && !ignores_nulls {
            Some(format!("the window function `{name}` uses IGNORE NULLS"))
        } else if name.contains(FILTER) && !filtered.contains(name) {
            Some(format!(
                "the window function `{name}` uses FILTER (WHERE ...)"
            ))
        } else {
            None
        }
    })
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
        let filter = lost("SELECT sum(a) FILTER (WHERE a > 1) OVER (ORDER BY id) FROM t").await;
        assert!(filter.unwrap().contains("FILTER"));
    }

    #[tokio::test]
    async fn plain_windows_and_groupings_pass() {
        for sql in [
            "SELECT lag(a) OVER (ORDER BY id), sum(a) OVER (PARTITION BY id) FROM t",
            "SELECT id, count(*) FROM t GROUP BY GROUPING SETS ((), (id))",
            "SELECT nth_value(a, 2) OVER (ORDER BY id DESC) FROM t",
            // Given back after decoding (`codec::repair_decoded`).
            "SELECT lag(a) IGNORE NULLS OVER (ORDER BY id) FROM t",
            "SELECT count(*) FROM t GROUP BY GROUPING SETS (())",
        ] {
            assert_eq!(lost(sql).await, None, "{sql}");
        }
    }
}
