//! Repairs `generate_series` / `range` scans that read no column (`SELECT count(*) FROM
//! generate_series(1, 10)`).
//!
//! DataFusion 55's plan serialisation writes such a scan's *projected* (empty) schema and drops
//! the projection, so the decoded generator builds one-column batches against a zero-column
//! schema and fails. We rebuild the scan with its full one-column schema and put the empty
//! projection in a `ProjectionExec` above it, a shape that survives every later serialisation
//! (to worker processes included).
//!
//! Upstream: datafusion-proto 55 `src/physical_plan/mod.rs`, the `LazyMemoryExec` arm of
//! `try_from_physical_plan` (writes the projected schema, drops the projection).
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::functions_table::generate_series::{
    GenSeriesArgs, GenerateSeriesTable, GenericSeriesState, TimestampValue,
};
use datafusion::physical_plan::memory::LazyMemoryExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::ExecutionPlan;

/// `plan` with every column-less series scan rebuilt as a full scan under an empty projection.
pub fn repair_series_scans(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(scan) = node.downcast_ref::<LazyMemoryExec>() else {
            return Ok(Transformed::no(node));
        };
        if !scan.schema().fields().is_empty() {
            return Ok(Transformed::no(node));
        }
        let [generator] = scan.generators().as_slice() else {
            return Ok(Transformed::no(node));
        };
        let Some((table, batch_size)) = full_table(generator.read().as_any()) else {
            return Ok(Transformed::no(node));
        };
        let generator = table.as_generator(batch_size)?;
        let full = LazyMemoryExec::try_new(TableProvider::schema(&table), vec![generator])?;
        let projection = ProjectionExec::try_new(Vec::<ProjectionExpr>::new(), Arc::new(full))?;
        Ok(Transformed::yes(
            Arc::new(projection) as Arc<dyn ExecutionPlan>
        ))
    })
    .map(|t| t.data)
}

/// The series a generator produces, with the schema `generate_series` gives it, and its
/// batch size; `None` for generators that are not series or produce nothing.
fn full_table(generator: &dyn std::any::Any) -> Option<(GenerateSeriesTable, usize)> {
    let value = |data_type| Arc::new(Schema::new(vec![Field::new("value", data_type, false)]));
    if let Some(g) = generator.downcast_ref::<GenericSeriesState<i64>>() {
        let args = GenSeriesArgs::Int64Args {
            start: *g.start(),
            end: *g.end(),
            step: *g.step(),
            include_end: g.include_end(),
            name: g.name(),
        };
        return Some((
            GenerateSeriesTable::new(value(DataType::Int64), args),
            g.batch_size(),
        ));
    }
    if let Some(g) = generator.downcast_ref::<GenericSeriesState<TimestampValue>>() {
        let tz = g.start().tz_str().cloned();
        let args = GenSeriesArgs::TimestampArgs {
            start: g.start().value(),
            end: g.end().value(),
            step: *g.step(),
            tz: tz.clone(),
            include_end: g.include_end(),
            name: g.name(),
        };
        let data_type = DataType::Timestamp(TimeUnit::Nanosecond, tz);
        return Some((
            GenerateSeriesTable::new(value(data_type), args),
            g.batch_size(),
        ));
    }
    None
}
