//! Field metadata of function results, which DataFusion 55's plan encoding leaves out, given
//! back after each decode.
//!
//! A scalar function's result field travels as name, type and nullability only, so its
//! metadata — `with_metadata(col, {...})`, a UDF whose result field carries some — was lost
//! wherever a plan was decoded (from datafusion-python, and again on each worker), and
//! `arrow_metadata(...)` over it gave NULL where single-node gives the value. After decoding,
//! each function's result field is computed again from its arguments, as planning computes
//! it, and its metadata taken back (in projections, filters and grouping keys, where
//! functions meet rows). On workers this runs through a marker at each fragment's
//! root (`operators::MetadataRepair`), which the session codec decodes as the repaired fragment.
//!
//! Upstream: datafusion-proto 55.2.0 `PhysicalScalarUdfNode` (no field metadata).
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, PhysicalGroupBy};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::ExecutionPlan;

use crate::operators::{MetadataRepair, TaskMeter};
use crate::plan_nodes::{decode_marker, encode_marker};

const TAG: &[u8] = b"dfdpy.metadata-repair";

/// `plan` with each function's result field carrying the metadata planning gives it, where
/// functions are evaluated over rows: projections, filters, and grouping keys.
pub fn restore_field_metadata(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let restored = plan.transform_up(|node| {
        let rebuilt = if let Some(p) = node.downcast_ref::<ProjectionExec>() {
            repaired_projection(p)?
        } else if let Some(f) = node.downcast_ref::<FilterExec>() {
            repaired_filter(f)?
        } else if let Some(a) = node.downcast_ref::<AggregateExec>() {
            repaired_aggregate(a)?
        } else {
            None
        };
        Ok(match rebuilt {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(node),
        })
    })?;
    Ok(restored.data)
}

/// Built again when a function in it was repaired (also one nested in another, whose result
/// reads its argument's metadata: `arrow_metadata(with_metadata(b, ...))`, the output field
/// unchanged) or its fields change (a column's whose input was repaired below it: a
/// projection keeps the schema it was built with).
fn repaired_projection(p: &ProjectionExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let schema = p.input().schema();
    let mut changed = false;
    let exprs: Vec<ProjectionExpr> = p
        .expr()
        .iter()
        .map(|e| {
            let repaired = repair(&e.expr, &schema);
            changed |= repaired.transformed;
            ProjectionExpr {
                expr: repaired.data,
                alias: e.alias.clone(),
            }
        })
        .collect();
    let rebuilt = ProjectionExec::try_new(exprs, Arc::clone(p.input()))?;
    let rebuild = changed || rebuilt.schema() != p.schema();
    Ok(rebuild.then(|| Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
}

fn repaired_filter(f: &FilterExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let predicate = repair(f.predicate(), &f.input().schema());
    if !predicate.transformed {
        return Ok(None);
    }
    let rebuilt = FilterExecBuilder::from(f)
        .with_predicate(predicate.data)
        .build()?;
    Ok(Some(Arc::new(rebuilt)))
}

/// Grouping keys are evaluated where rows come in (partial and single modes); the modes
/// after them read the keys as columns.
fn repaired_aggregate(a: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let schema = a.input_schema();
    let group = a.group_expr();
    let mut changed = false;
    let exprs = group
        .expr()
        .iter()
        .map(|(e, name)| {
            let repaired = repair(e, &schema);
            changed |= repaired.transformed;
            (repaired.data, name.clone())
        })
        .collect();
    if !changed {
        return Ok(None);
    }
    let group = PhysicalGroupBy::new(
        exprs,
        group.null_expr().to_vec(),
        group.groups().to_vec(),
        group.has_grouping_set(),
    );
    let rebuilt = AggregateExec::try_new(
        *a.mode(),
        group,
        a.aggr_expr().to_vec(),
        a.filter_expr().to_vec(),
        Arc::clone(a.input()),
        schema,
    )?
    .with_limit_options(a.limit_options());
    Ok(Some(Arc::new(rebuilt)))
}

/// `expr` with its functions' result metadata as planning computes it (inner ones first, so
/// that an outer function sees its arguments' metadata). A function that cannot be planned
/// again here is left as it is.
fn repair(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &datafusion::arrow::datatypes::Schema,
) -> Transformed<Arc<dyn PhysicalExpr>> {
    let repaired = Arc::clone(expr).transform_up(|e| {
        let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() else {
            return Ok(Transformed::no(e));
        };
        let fun = Arc::new(f.fun().clone());
        let config = Arc::new(f.config_options().clone());
        let planned = ScalarFunctionExpr::try_new(
            Arc::clone(&fun),
            f.args().to_vec(),
            schema,
            Arc::clone(&config),
        );
        let (Ok(planned), Ok(have)) = (planned, f.return_field(schema)) else {
            return Ok(Transformed::no(e));
        };
        let want = planned.return_field(schema)?.metadata().clone();
        if &want == have.metadata() {
            return Ok(Transformed::no(e));
        }
        let field = Arc::new(have.as_ref().clone().with_metadata(want));
        let fixed = ScalarFunctionExpr::new(f.name(), fun, f.args().to_vec(), field, config)
            .with_nullable(f.nullable());
        Ok(Transformed::yes(Arc::new(fixed) as Arc<dyn PhysicalExpr>))
    });
    repaired.unwrap_or_else(|_| Transformed::no(Arc::clone(expr)))
}

/// `fragment` marked for repair on decoding.
pub fn mark(fragment: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    Arc::new(MetadataRepair::new(fragment))
}

/// Writes `node` if it is the marker.
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    encode_marker::<MetadataRepair>(node, TAG, buf)
}

/// The repaired fragment, if `buf` is the marker.
pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    // Every task's fragment is marked: decoded, it is the task, counted for the meters.
    decode_marker(buf, TAG, inputs, "MetadataRepair")
        .map(|input| input.and_then(super::repair_decoded).map(TaskMeter::wrap))
}
