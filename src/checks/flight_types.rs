//! Column types that cannot cross between processes, found before a plan is sent to worker
//! processes, so such a query runs single-node (the caller's fallback) instead of failing.
//!
//! arrow-flight 59 announces a `LargeList` column as a `List` (its `prepare_field_for_flight`
//! builds `Field::new_list` for both), so the reader takes the 64-bit offsets for 32-bit ones:
//! "non-monotonic offset", or wrong rows. Every stage's rows travel over Arrow Flight between
//! worker processes and to the coordinator; the embedded cluster's do not (in-process
//! channels), so only worker processes are concerned.
//!
//! Upstream: arrow-flight 59 `src/encode.rs` (`prepare_field_for_flight`).
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

use crate::errors::not_distributable;

/// Fails (as not distributable, naming the column) when a node of `plan` produces a column
/// holding a `LargeList`.
pub fn check_flight_types(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    let mut found = None;
    plan.apply(|node| {
        found = node
            .schema()
            .fields()
            .iter()
            .find(|f| holds_large_list(f))
            .map(|f| f.name().clone());
        Ok(match found {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match found {
        Some(column) => Err(not_distributable(format!(
            "its column {column:?} holds a large_list, which arrow-flight 59 sends between \
             worker processes as a list (the offsets are misread); the embedded cluster \
             runs it distributed"
        ))),
        None => Ok(()),
    }
}

fn holds_large_list(field: &Field) -> bool {
    match field.data_type() {
        DataType::LargeList(_) => true,
        DataType::List(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => holds_large_list(f),
        DataType::Struct(fields) => fields.iter().any(|f| holds_large_list(f)),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| holds_large_list(f)),
        _ => false,
    }
}
