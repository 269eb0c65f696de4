//! `LargeList` columns across worker processes.
//!
//! arrow-flight 59 announces a `LargeList` field as a `List` (`prepare_field_for_flight`)
//! while datafusion-distributed sends the arrays as they are (`DictionaryHandling::Resend`):
//! the reader would take 64-bit offsets for 32-bit ones. So each worker stage whose output
//! holds one casts it to `List` at its root — what the announcement says, so it is read right
//! — and the stage reading it casts it back above the network boundary: each side of every
//! boundary sees its own type. An array past 2^31 values in one batch fails the cast (an error
//! saying so), never a wrong row. Applied after distribution, for worker processes only (the
//! embedded cluster's stages pass arrays in memory).
//!
//! Upstream: arrow-flight 59 `src/encode.rs` (`prepare_field_for_flight`).
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{NetworkBoundaryExt, Stage};

/// `plan` (distributed) with each large list crossing a network boundary sent as a list and
/// read back as a large list.
pub fn carry_large_lists(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let carried = plan.transform_up(|node| {
        let Some(boundary) = node.as_network_boundary() else {
            return Ok(Transformed::no(node));
        };
        let Stage::Local(stage) = boundary.input_stage() else {
            return Ok(Transformed::no(node));
        };
        let schema = stage.plan.schema();
        let sent: Vec<Option<DataType>> = schema
            .fields()
            .iter()
            .map(|f| as_sent(f.data_type()))
            .collect();
        if sent.iter().all(Option::is_none) {
            return Ok(Transformed::no(node));
        }
        let small = cast_columns(Arc::clone(&stage.plan), |i| sent[i].clone())?;
        let crossing = replace_children_if_necessary(Arc::clone(&node), vec![small])?;
        let back = cast_columns(crossing, |i| {
            sent[i]
                .as_ref()
                .map(|_| schema.field(i).data_type().clone())
        })?;
        Ok(Transformed::yes(back))
    })?;
    Ok(carried.data)
}

/// `input`'s columns, those `target` names a type for cast to it.
fn cast_columns(
    input: Arc<dyn ExecutionPlan>,
    target: impl Fn(usize) -> Option<DataType>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = input.schema();
    let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(f.name(), i));
            let expr = match target(i) {
                Some(to) => Arc::new(CastExpr::new(column, to, None)) as _,
                None => column,
            };
            (expr, f.name().clone())
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}

/// The type arrow-flight announces for `data_type` when it differs (a large list in it,
/// reached through lists and structs, as `prepare_field_for_flight` rewrites them).
fn as_sent(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::LargeList(f) => Some(DataType::List(Arc::new(sent_field(f)))),
        DataType::List(f) => {
            as_sent(f.data_type()).map(|_| DataType::List(Arc::new(sent_field(f))))
        }
        DataType::Struct(fields) => fields
            .iter()
            .any(|f| as_sent(f.data_type()).is_some())
            .then(|| DataType::Struct(fields.iter().map(|f| Arc::new(sent_field(f))).collect())),
        _ => None,
    }
}

fn sent_field(field: &Field) -> Field {
    match as_sent(field.data_type()) {
        Some(to) => field.clone().with_data_type(to),
        None => field.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(t: DataType) -> Arc<Field> {
        Arc::new(Field::new("item", t, true))
    }

    /// As arrow-flight 59 announces them: every large list reached through lists and structs
    /// becomes a list; other types, and types holding none, are left.
    #[test]
    fn large_lists_are_sent_as_flight_announces_them() {
        let large = DataType::LargeList(item(DataType::Int64));
        let list = DataType::List(item(DataType::Int64));
        assert_eq!(as_sent(&large), Some(list.clone()));
        assert_eq!(
            as_sent(&DataType::List(item(large.clone()))),
            Some(DataType::List(item(list.clone())))
        );
        let nested = DataType::LargeList(item(large.clone()));
        assert_eq!(as_sent(&nested), Some(DataType::List(item(list.clone()))));
        let fields = vec![
            Field::new("x", large.clone(), true),
            Field::new("y", DataType::Utf8, false),
        ];
        let sent = vec![
            Field::new("x", list.clone(), true),
            Field::new("y", DataType::Utf8, false),
        ];
        assert_eq!(
            as_sent(&DataType::Struct(fields.into())),
            Some(DataType::Struct(sent.into()))
        );
        for unchanged in [
            list,
            DataType::LargeUtf8,
            DataType::LargeBinary,
            DataType::FixedSizeList(item(large.clone()), 2),
        ] {
            assert_eq!(as_sent(&unchanged), None, "{unchanged}");
        }
    }
}
