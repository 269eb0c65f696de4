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
//!
//! The commit: tasks write under a directory private to this run, `<target>/.dfdpy-<id>/`
//! (readers of the target skip subdirectories that are not `key=value` partitions), which
//! `SumCounts` (`operators::SumCounts`) moves into place once every task succeeded, or removes.
use std::any::Any;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::datasource::file_format::csv::CsvSink;
use datafusion::datasource::file_format::json::JsonSink;
use datafusion::datasource::file_format::parquet::ParquetSink;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::datasource::physical_plan::{FileSink, FileSinkConfig};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use crate::operators::{MergeTaskPartitions, Staging, SumCounts};

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
    let Some((staged_sink, staging)) = staged(sink.sink(), config)? else {
        return Ok(plan);
    };
    let per_task = Arc::new(MergeTaskPartitions::new(rows)) as Arc<dyn ExecutionPlan>;
    let sinks = Arc::new(DataSinkExec::new(
        per_task,
        staged_sink,
        sink.sort_order().clone(),
    ));
    let gathered = Arc::new(CoalescePartitionsExec::new(sinks));
    Ok(Arc::new(SumCounts::new(gathered, staging)))
}

/// The same sink writing under a directory of this run's own.
fn staged(
    sink: &dyn DataSink,
    config: &FileSinkConfig,
) -> Result<Option<(Arc<dyn DataSink>, Staging)>> {
    let target = &config.table_paths[0];
    let id = uuid::Uuid::new_v4().simple().to_string();
    let base = target.as_str().trim_end_matches('/');
    let private_url = ListingTableUrl::parse(format!("{base}/.dfdpy-{id}/"))?;
    let staging = Staging::new(
        config.object_store_url.clone(),
        target.prefix().clone(),
        private_url.prefix().clone(),
    );
    let mut moved = config.clone();
    moved.table_paths = vec![private_url];
    let any = sink as &dyn Any;
    let sink: Arc<dyn DataSink> = if let Some(s) = any.downcast_ref::<ParquetSink>() {
        Arc::new(ParquetSink::new(moved, s.parquet_options().clone()))
    } else if let Some(s) = any.downcast_ref::<CsvSink>() {
        Arc::new(CsvSink::new(moved, s.writer_options().clone()))
    } else if let Some(s) = any.downcast_ref::<JsonSink>() {
        Arc::new(JsonSink::new(moved, s.writer_options().clone()))
    } else {
        return Ok(None);
    };
    Ok(Some((sink, staging)))
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
