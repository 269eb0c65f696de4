//! Writes from every task: a file sink at the root of a plan is moved into the last stage.
//!
//! DataFusion plans `COPY ... TO` and `INSERT INTO` a listing table as one `DataSinkExec` over
//! its input merged into one partition, and the distributed planner then brings every row to
//! the coordinator to write them there. Here the sink's input is merged per task instead
//! (`MergeTaskPartitions`), so the sink runs in each task of the stage that computes its rows
//! and writes that task's files straight to the target; only the tasks' row counts reach the
//! coordinator, which adds them up (`SumCounts`). Each sink names its files with a random
//! write id of its own, so tasks never collide. Left on the coordinator: one file
//! (`single_file_output`), writes that replace what is there, sinks that have no serialised
//! form, and inputs merged in order.
use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::datasource::file_format::csv::CsvSink;
use datafusion::datasource::file_format::json::JsonSink;
use datafusion::datasource::file_format::parquet::ParquetSink;
use datafusion::datasource::physical_plan::{FileSink, FileSinkConfig};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{
    replace_children_if_necessary, Boundedness, EmissionType,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};

use crate::codec::MergeTaskPartitions;

/// `plan` with its root file sink writing from every task, where that keeps its meaning.
pub fn write_from_every_task(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(sink) = plan.downcast_ref::<DataSinkExec>() else {
        return Ok(plan);
    };
    let Some(config) = file_sink_config(sink.sink()) else {
        return Ok(plan);
    };
    let single_file = config
        .file_output_mode
        .single_file_output(&config.table_paths[0]);
    if single_file || config.insert_op != InsertOp::Append {
        return Ok(plan);
    }
    let input = sink.input();
    let rows = match input.downcast_ref::<CoalescePartitionsExec>() {
        Some(merge) if merge.fetch().is_none() => Arc::clone(merge.input()),
        Some(_) => return Ok(plan),
        None if input.output_partitioning().partition_count() == 1 => Arc::clone(input),
        None => return Ok(plan),
    };
    let per_task = Arc::new(MergeTaskPartitions::new(rows)) as Arc<dyn ExecutionPlan>;
    let sinks = replace_children_if_necessary(Arc::clone(&plan), vec![per_task])?;
    let gathered = Arc::new(CoalescePartitionsExec::new(sinks));
    Ok(Arc::new(SumCounts::new(gathered)))
}

/// The file sinks whose plans DataFusion 55 serialises (to run on workers).
fn file_sink_config(sink: &dyn DataSink) -> Option<&FileSinkConfig> {
    let any = sink as &dyn Any;
    if let Some(s) = any.downcast_ref::<ParquetSink>() {
        return Some(s.config());
    }
    if let Some(s) = any.downcast_ref::<CsvSink>() {
        return Some(s.config());
    }
    any.downcast_ref::<JsonSink>().map(|s| s.config())
}

/// The tasks' row counts (one `count` row each) added up into the one row a write returns.
#[derive(Debug)]
pub struct SumCounts {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl SumCounts {
    fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Self {
            input,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for SumCounts {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SumCounts: rows written by every task")
    }
}

impl ExecutionPlan for SumCounts {
    fn name(&self) -> &str {
        "SumCounts"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(Self::new(input))),
            _ => internal_err!("SumCounts adds up one input"),
        }
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("SumCounts has one partition, not {partition}");
        }
        let schema = self.schema();
        let counts = self.input.execute(0, ctx)?;
        let out_schema = Arc::clone(&schema);
        let total = futures::stream::once(async move {
            let batches: Vec<RecordBatch> = counts.try_collect().await?;
            let mut sum = 0u64;
            for batch in &batches {
                let Some(column) = batch.column(0).as_any().downcast_ref::<UInt64Array>() else {
                    return internal_err!("a write's count is not a UInt64 column");
                };
                sum += column.iter().flatten().sum::<u64>();
                debug_assert!(column.len() <= 1);
            }
            Ok(RecordBatch::try_new(
                out_schema,
                vec![Arc::new(UInt64Array::from(vec![sum]))],
            )?)
        })
        .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, total)))
    }
}
