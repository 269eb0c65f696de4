//! Column types that cannot cross between processes, found before a plan is sent to worker
//! processes, so such a query runs single-node (the caller's fallback) instead of failing.
//!
//! arrow-flight 59 announces a `LargeList` field as a `List` (its `prepare_field_for_flight`
//! builds `Field::new_list` for both) while the arrays go as they are, so the reader would
//! take 64-bit offsets for 32-bit ones. Large lists reached through lists and structs are
//! sent as lists and read back (`plan_rewrites::carry_large_lists`); one inside a union or
//! a dictionary's values cannot be cast so, and is refused here. Only worker processes are
//! concerned (the embedded cluster's stages pass arrays in memory).
//!
//! Upstream: arrow-flight 59 `src/encode.rs` (`prepare_field_for_flight`).
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

use crate::errors::not_distributable;

/// Fails (as not distributable, naming the column) when a node of `plan` produces a column
/// holding a `LargeList` inside a union or a dictionary.
pub fn check_flight_types(plan: &Arc<dyn ExecutionPlan>) -> Result<()> {
    let mut found = None;
    plan.apply(|node| {
        found = node
            .schema()
            .fields()
            .iter()
            .find(|f| holds_large_list(f.data_type(), false))
            .map(|f| f.name().clone());
        Ok(match found {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match found {
        Some(column) => Err(not_distributable(format!(
            "its column {column:?} holds a large_list inside a union or a dictionary, which \
             arrow-flight 59 sends between worker processes as a list (the offsets are \
             misread); the embedded cluster runs it distributed"
        ))),
        None => Ok(()),
    }
}

/// Whether `data_type` holds a `LargeList` that a union or a dictionary holds (`inside`: one
/// of them is around it), through the types arrow-flight rewrites.
fn holds_large_list(data_type: &DataType, inside: bool) -> bool {
    match data_type {
        DataType::LargeList(f) => inside || holds_large_list(f.data_type(), inside),
        DataType::List(f) => holds_large_list(f.data_type(), inside),
        DataType::Struct(fields) => fields
            .iter()
            .any(|f| holds_large_list(f.data_type(), inside)),
        DataType::Union(fields, _) => fields
            .iter()
            .any(|(_, f)| holds_large_list(f.data_type(), true)),
        DataType::Dictionary(_, values) => holds_large_list(values, true),
        _ => false,
    }
}
