//! `KeepExec`: each task of a query's last stage holds its rows where it ran, and tells the
//! coordinator only how many it holds.
//!
//! `keep_on_workers` puts it at the plan's root under a merge, as a write's sink is placed
//! (`plan_rewrites::parallel_writes`): the distributed planner cuts the stage at the merge, so
//! the node runs in every task of the stage that computes the rows. The tasks of that stage
//! are routed round-robin over the worker list the node carries, so that the coordinator
//! knows which worker holds each task's parts from the task index alone.
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, StringArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use datafusion_distributed::DistributedTaskContext;
use futures::{StreamExt, TryStreamExt};
use url::Url;
use uuid::Uuid;

use super::part::KeptPart;
use super::store::{self, PROCESS};
use crate::plan_nodes::only;

const TAG: &[u8] = b"dfdpy.keep:";

#[derive(Debug)]
pub struct KeepExec {
    input: Arc<dyn ExecutionPlan>,
    table: Uuid,
    /// Added to the task index in the parts' keys (see `Role::Keep`).
    task_base: u32,
    /// The workers the stage's tasks go to, task `i` to `workers[i % len]`.
    workers: Vec<Url>,
    /// The table's schema, when the rows join an existing table (`INSERT`): each batch is
    /// held as that schema's, its types cast and its non-null columns checked, as
    /// DataFusion's own sinks check them.
    target: Option<SchemaRef>,
    properties: Arc<PlanProperties>,
}

fn summary_schema() -> SchemaRef {
    let u = |n: &str| Field::new(n, DataType::UInt64, false);
    Arc::new(Schema::new(vec![
        u("task"),
        u("partition"),
        u("rows"),
        u("bytes"),
        Field::new("on_disk", DataType::Boolean, false),
        Field::new("process", DataType::Utf8, false),
        Field::new("holder", DataType::Utf8, true),
    ]))
}

/// `plan` rewritten so that each task of its last stage keeps its rows as `table`'s parts.
pub fn keep_on_workers(
    plan: Arc<dyn ExecutionPlan>,
    table: Uuid,
    task_base: u32,
    workers: Vec<Url>,
    target: Option<SchemaRef>,
) -> Arc<dyn ExecutionPlan> {
    let keep = Arc::new(KeepExec::new(plan, table, task_base, workers, target));
    Arc::new(CoalescePartitionsExec::new(keep))
}

impl KeepExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        table: Uuid,
        task_base: u32,
        workers: Vec<Url>,
        target: Option<SchemaRef>,
    ) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(summary_schema()),
            input.output_partitioning().clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Self {
            input,
            table,
            task_base,
            workers,
            target,
            properties: Arc::new(properties),
        }
    }

    /// The worker task `task` of this stage is sent to.
    pub fn worker_of(&self, task: usize) -> Option<&Url> {
        (!self.workers.is_empty()).then(|| &self.workers[task % self.workers.len()])
    }
}

/// The parts the summary batches of a keeping run name, with their holders.
pub fn parts_of(batches: &[RecordBatch]) -> Result<Vec<KeptPart>> {
    let bad = || exec_datafusion_err!("a kept table's summary is not what KeepExec writes");
    let mut parts = Vec::new();
    for b in batches {
        let u = |i: usize| -> Result<&UInt64Array> {
            b.column(i)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(bad)
        };
        let on_disk = b
            .column(4)
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(bad)?;
        let process = b
            .column(5)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(bad)?;
        let holder = b
            .column(6)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(bad)?;
        for r in 0..b.num_rows() {
            parts.push(KeptPart {
                task: u(0)?.value(r) as u32,
                partition: u(1)?.value(r) as u32,
                rows: u(2)?.value(r),
                bytes: u(3)?.value(r),
                on_disk: on_disk.value(r),
                process: process.value(r).to_string(),
                holder: (!holder.is_null(r)).then(|| holder.value(r).to_string()),
                store: None,
            });
        }
    }
    Ok(parts)
}

pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let keep = node.downcast_ref::<KeepExec>()?;
    buf.extend_from_slice(TAG);
    let workers: Vec<&str> = keep.workers.iter().map(Url::as_str).collect();
    Some((|| {
        let target = keep.target.as_deref().map(encode_schema).transpose()?;
        serde_json::to_writer(
            &mut *buf,
            &(keep.table.to_string(), keep.task_base, workers, target),
        )
        .map_err(|e| exec_datafusion_err!("encoding KeepExec: {e}"))
    })())
}

fn encode_schema(schema: &Schema) -> Result<String> {
    use base64::Engine;
    let proto = datafusion_proto::protobuf::Schema::try_from(schema)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(prost::Message::encode_to_vec(&proto)))
}

fn decode_schema(text: &str) -> Result<SchemaRef> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| exec_datafusion_err!("KeepExec: {e}"))?;
    let proto: datafusion_proto::protobuf::Schema = prost::Message::decode(bytes.as_slice())
        .map_err(|e| exec_datafusion_err!("KeepExec: {e}"))?;
    Ok(Arc::new(Schema::try_from(&proto)?))
}

/// `batch` as a batch of `target` (a table's schema): its columns cast where only their
/// types' encodings differ, and refused where a non-null column holds nulls.
pub fn conform(batch: RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema() == *target {
        return Ok(batch);
    }
    if batch.num_columns() != target.fields().len() {
        return Err(exec_datafusion_err!(
            "rows of {} columns cannot join a table of {}",
            batch.num_columns(),
            target.fields().len()
        ));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(target.fields())
        .map(|(c, f)| match c.data_type() == f.data_type() {
            true => Ok(Arc::clone(c)),
            false => datafusion::arrow::compute::cast(c, f.data_type()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options =
        datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(target),
        columns,
        &options,
    )?)
}

pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let rest = buf.strip_prefix(TAG)?;
    Some((|| {
        type Fields = (String, u32, Vec<String>, Option<String>);
        let (table, task_base, workers, target): Fields =
            serde_json::from_slice(rest).map_err(|e| exec_datafusion_err!("KeepExec: {e}"))?;
        let target = target.as_deref().map(decode_schema).transpose()?;
        let table = Uuid::parse_str(&table).map_err(|e| exec_datafusion_err!("KeepExec: {e}"))?;
        let workers = workers
            .iter()
            .map(|w| Url::parse(w).map_err(|e| exec_datafusion_err!("KeepExec: {e}")))
            .collect::<Result<_>>()?;
        let input = only(inputs, "KeepExec")?;
        Ok(Arc::new(KeepExec::new(input, table, task_base, workers, target)) as _)
    })())
}

impl DisplayAs for KeepExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "KeepExec: table={}", self.table)
    }
}

impl ExecutionPlan for KeepExec {
    crate::plan_nodes::one_input_node!("KeepExec", input, |this, input| Self::new(
        input,
        this.table,
        this.task_base,
        this.workers.clone(),
        this.target.clone()
    ));

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let task = DistributedTaskContext::from_ctx(&ctx).task_index;
        // Where its stage reads kept parts, the task runs on their holder (`route_tasks`).
        let holder = super::scan::holder_read_in(&self.input)
            .or_else(|| self.worker_of(task).map(Url::to_string));
        let task = self.task_base as usize + task;
        let rows = self.input.execute(partition, Arc::clone(&ctx))?;
        let (table, schema) = (self.table, self.schema());
        let target = self.target.clone();
        let input_schema = target.clone().unwrap_or_else(|| self.input.schema());
        let out = Arc::clone(&schema);
        let kept = futures::stream::once(async move {
            let mut batches: Vec<RecordBatch> = rows.try_collect().await?;
            if let Some(target) = &target {
                batches = batches
                    .into_iter()
                    .map(|b| conform(b, target))
                    .collect::<Result<_>>()?;
            }
            let key = (task as u32, partition as u32);
            let size = store::put(table, key, input_schema, batches, &ctx)?;
            let col = |v: u64| Arc::new(UInt64Array::from(vec![v])) as ArrayRef;
            Ok(RecordBatch::try_new(
                out,
                vec![
                    col(task as u64),
                    col(partition as u64),
                    col(size.rows),
                    col(size.bytes),
                    Arc::new(BooleanArray::from(vec![size.on_disk])),
                    Arc::new(StringArray::from(vec![PROCESS.to_string()])),
                    Arc::new(StringArray::from(vec![holder])),
                ],
            )?)
        })
        .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, kept)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array};

    fn schema(nullable: bool, ty: DataType) -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("a", ty, nullable)]))
    }

    #[test]
    fn rows_take_the_table_s_schema_or_are_refused() {
        let ints = |v: Vec<Option<i32>>| {
            let col = Arc::new(Int32Array::from(v)) as ArrayRef;
            RecordBatch::try_new(schema(true, DataType::Int32), vec![col]).unwrap()
        };
        // Cast to the table's type, and named and typed as the table's.
        let table = schema(false, DataType::Int64);
        let held = conform(ints(vec![Some(1), Some(2)]), &table).unwrap();
        assert_eq!(held.schema(), table);
        let col = held
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(col.values(), &[1, 2]);
        // A null for a column that holds none: refused, as DataFusion's sinks refuse it.
        let err = conform(ints(vec![Some(1), None]), &table).unwrap_err();
        assert!(err.to_string().contains("non-nullable"), "{err}");
        // A nullable table takes it.
        assert!(conform(ints(vec![None]), &schema(true, DataType::Int64)).is_ok());
        // Rows of another width never join.
        let two = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ]));
        assert!(conform(ints(vec![Some(1)]), &two).is_err());
    }

    #[test]
    fn a_keeping_node_travels_with_its_table_s_schema() {
        let target = schema(false, DataType::Int64);
        let text = encode_schema(&target).unwrap();
        assert_eq!(decode_schema(&text).unwrap(), target);
    }
}
