//! `SpoolExec`: a worker stage's task, its output partitions written to the spool before they
//! are passed on, or read from there when an earlier run of the scan finished the task.
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use datafusion_distributed::DistributedTaskContext;
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::plan_nodes::only;

const TAG: &[u8] = b"dfdpy.spool:";

/// Leaf-stage tasks computing at once in this process: a task's partitions already use the
/// cores (one per core), so one task per two cores, and tasks finish one after another
/// rather than all at the end.
static TURNS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    Arc::new(Semaphore::new((cores / 2).max(1)))
});

/// What the partitions of one task share (each task runs its own decoded plan).
#[derive(Debug, Default)]
struct Task {
    /// Whether its files were all there when its first partition ran: decided once, so that
    /// its partitions come from one run (a task's partitions split its rows in a way another
    /// run may not repeat).
    reuse: OnceLock<bool>,
    /// Its turn (leaf stages), held while any of its partitions computes.
    turn: tokio::sync::Mutex<Option<Arc<OwnedSemaphorePermit>>>,
    /// Its partitions still computing; the last one gives the turn back.
    computing: AtomicUsize,
}

impl Task {
    async fn take_turn(&self) -> Arc<OwnedSemaphorePermit> {
        let mut turn = self.turn.lock().await;
        if let Some(turn) = &*turn {
            return Arc::clone(turn);
        }
        let permit = Arc::new(TURNS.clone().acquire_owned().await.expect("never closed"));
        *turn = Some(Arc::clone(&permit));
        permit
    }

    async fn partition_done(&self) {
        if self.computing.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.turn.lock().await.take();
        }
    }
}

#[derive(Debug)]
pub struct SpoolExec {
    input: Arc<dyn ExecutionPlan>,
    /// The scan's spool directory.
    dir: PathBuf,
    stage: usize,
    /// The stage reads no other stage (its tasks take turns, see `TURNS`).
    leaf: bool,
    /// Its tasks' shared state, by task directory (a plan a process runs for several tasks
    /// is one node for them all).
    tasks: Mutex<HashMap<PathBuf, Arc<Task>>>,
}

impl SpoolExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, dir: PathBuf, stage: usize, leaf: bool) -> Self {
        Self {
            input,
            dir,
            stage,
            leaf,
            tasks: Mutex::default(),
        }
    }

    /// The directory of task `index` of `count` of this stage.
    fn task_dir(&self, ctx: &Arc<TaskContext>) -> PathBuf {
        let task = DistributedTaskContext::from_ctx(ctx);
        self.dir
            .join(format!("stage-{}", self.stage))
            .join(format!("task-{}-of-{}", task.task_index, task.task_count))
    }
}

fn file_of(task_dir: &Path, partition: usize) -> PathBuf {
    task_dir.join(format!("{partition}.arrow"))
}

impl DisplayAs for SpoolExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SpoolExec: stage {}", self.stage)
    }
}

impl ExecutionPlan for SpoolExec {
    crate::plan_nodes::one_input_node!("SpoolExec", input, |this, input| SpoolExec::new(
        input,
        this.dir.clone(),
        this.stage,
        this.leaf
    ));

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let task_dir = self.task_dir(&ctx);
        let parts = self.input.output_partitioning().partition_count();
        let task = {
            let mut tasks = self.tasks.lock().expect("poisoned");
            Arc::clone(tasks.entry(task_dir.clone()).or_default())
        };
        let reuse = *task.reuse.get_or_init(|| {
            task.computing.store(parts, Ordering::Release);
            (0..parts).all(|p| file_of(&task_dir, p).exists())
        });
        let file = file_of(&task_dir, partition);
        let schema = self.input.schema();
        if reuse {
            return read(file, schema);
        }
        let (input, leaf) = (Arc::clone(&self.input), self.leaf);
        let out = Arc::clone(&schema);
        let written = futures::stream::once(async move {
            let turn = match leaf {
                true => Some(task.take_turn().await),
                false => None,
            };
            let rows = input.execute(partition, ctx)?;
            let written = write(rows, &task_dir, &file, &out).await;
            drop(turn);
            task.partition_done().await;
            written?;
            read(file, out)
        })
        .map(|stream| match stream {
            Ok(stream) => stream,
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, written)))
    }
}

/// Writes `rows` to `file` whole — under a temporary name, renamed into place once the last
/// batch is written, so that a file there is a finished task's partition.
async fn write(
    mut rows: SendableRecordBatchStream,
    task_dir: &Path,
    file: &Path,
    schema: &datafusion::arrow::datatypes::SchemaRef,
) -> Result<()> {
    std::fs::create_dir_all(task_dir)?;
    let temporary = file.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    let outcome = async {
        let mut writer = StreamWriter::try_new(BufWriter::new(File::create(&temporary)?), schema)?;
        while let Some(batch) = rows.next().await {
            writer.write(&batch?)?;
        }
        writer.finish()?;
        std::fs::rename(&temporary, file)?;
        Ok(())
    }
    .await;
    if outcome.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    outcome
}

/// The batches of a spooled partition.
fn read(
    file: PathBuf,
    schema: datafusion::arrow::datatypes::SchemaRef,
) -> Result<SendableRecordBatchStream> {
    let opened = File::open(&file)
        .map_err(|e| exec_datafusion_err!("spooled partition {}: {e}", file.display()))?;
    let reader = StreamReader::try_new(BufReader::new(opened), None)?;
    let batches = reader.map(|b: std::result::Result<RecordBatch, _>| b.map_err(Into::into));
    Ok(Box::pin(RecordBatchStreamAdapter::new(
        schema,
        futures::stream::iter(batches),
    )))
}

pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let spool = node.downcast_ref::<SpoolExec>()?;
    buf.extend_from_slice(TAG);
    let dir = spool.dir.to_string_lossy();
    Some(
        serde_json::to_writer(&mut *buf, &(dir, spool.stage, spool.leaf))
            .map_err(|e| exec_datafusion_err!("encoding SpoolExec: {e}")),
    )
}

pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let rest = buf.strip_prefix(TAG)?;
    Some((|| {
        let (dir, stage, leaf): (String, usize, bool) =
            serde_json::from_slice(rest).map_err(|e| exec_datafusion_err!("SpoolExec: {e}"))?;
        let input = only(inputs, "SpoolExec")?;
        Ok(Arc::new(SpoolExec::new(input, PathBuf::from(dir), stage, leaf)) as _)
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::execution::config::SessionConfig;
    use datafusion::physical_plan::common::collect;

    fn rows(values: &[&[i64]]) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let partitions: Vec<Vec<RecordBatch>> = values
            .iter()
            .map(|v| {
                let col = Arc::new(Int64Array::from(v.to_vec())) as _;
                vec![RecordBatch::try_new(Arc::clone(&schema), vec![col]).unwrap()]
            })
            .collect();
        MemorySourceConfig::try_new_exec(&partitions, schema, None).unwrap()
    }

    fn task_ctx() -> Arc<TaskContext> {
        let task = DistributedTaskContext {
            task_index: 0,
            task_count: 1,
        };
        let config = SessionConfig::new().with_extension(Arc::new(task));
        Arc::new(TaskContext::default().with_session_config(config))
    }

    async fn run(plan: &SpoolExec) -> Vec<Vec<i64>> {
        let mut out = Vec::new();
        for p in 0..plan.properties().output_partitioning().partition_count() {
            let batches = collect(plan.execute(p, task_ctx()).unwrap()).await.unwrap();
            let mut values = Vec::new();
            for b in batches {
                let col = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                values.extend((0..col.len()).map(|i| col.value(i)));
            }
            out.push(values);
        }
        out
    }

    #[tokio::test]
    async fn a_finished_task_is_read_back_and_a_partial_one_computed_whole() {
        let dir = std::env::temp_dir().join(format!("dfdpy-spool-test-{}", uuid::Uuid::new_v4()));
        let first = SpoolExec::new(rows(&[&[1, 2], &[3]]), dir.clone(), 1, true);
        assert_eq!(run(&first).await, vec![vec![1, 2], vec![3]]);
        // Another run with the same split finds the task's files: read, not computed.
        let again = SpoolExec::new(rows(&[&[7], &[8]]), dir.clone(), 1, true);
        assert_eq!(run(&again).await, vec![vec![1, 2], vec![3]]);
        // A partition's file missing: the task is computed again, all of it.
        let task_dir = dir.join("stage-1").join("task-0-of-1");
        std::fs::remove_file(file_of(&task_dir, 1)).unwrap();
        let partial = SpoolExec::new(rows(&[&[7], &[8]]), dir.clone(), 1, true);
        assert_eq!(run(&partial).await, vec![vec![7], vec![8]]);
        // Nothing half-written is left: only the partitions' files.
        let mut names: Vec<String> = std::fs::read_dir(&task_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["0.arrow", "1.arrow"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_spooling_node_travels_with_its_place() {
        let node: Arc<dyn ExecutionPlan> = Arc::new(SpoolExec::new(
            rows(&[&[1]]),
            PathBuf::from("/spool/scan"),
            3,
            false,
        ));
        let mut buf = Vec::new();
        encode(&node, &mut buf).unwrap().unwrap();
        let back = decode(&buf, &[rows(&[&[1]])]).unwrap().unwrap();
        let back = back.downcast_ref::<SpoolExec>().unwrap();
        assert_eq!(
            (back.dir.as_path(), back.stage, back.leaf),
            (Path::new("/spool/scan"), 3, false)
        );
    }
}
