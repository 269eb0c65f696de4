//! `SpoolExec`: a worker stage's task, its output partitions written to the spool before they
//! are passed on, or read from there when an earlier run of the scan finished the task.
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
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

use super::chunks;
use crate::plan_nodes::only;

const TAG: &[u8] = b"dfdpy.spool:";
/// Bytes buffered per spool file read or written: an IPC batch is many small writes.
const IO_BUFFER: usize = 1 << 20;

/// A task's files are written only once it has run this long (its batches held until then, or
/// until they are `HOLD_BYTES`): spooling is insurance, and a loss in a task's first half
/// second costs that again (sub-second queries pay little for it).
const SPOOL_AFTER: Duration = Duration::from_millis(500);
/// The most a partition holds before its file is opened, however young its task.
const HOLD_BYTES: usize = 8 << 20;

/// What the partitions of one task share (each task runs its own decoded plan).
#[derive(Debug, Default)]
struct Task {
    /// Whether its files were all there when its first partition ran: decided once, so that
    /// its partitions come from one run (a task's partitions may split its rows in a way
    /// another run does not repeat, e.g. round-robin).
    reuse: OnceLock<bool>,
    /// A leaf task cut in chunks (None: not cut).
    chunks: OnceLock<Option<Arc<Chunks>>>,
    /// When its first partition began (a task not cut spools from `SPOOL_AFTER` after).
    started: OnceLock<Instant>,
}

/// A leaf task's chunks, read by its partitions one after another.
#[derive(Debug)]
struct Chunks {
    plans: Vec<Arc<dyn ExecutionPlan>>,
    started: Instant,
    /// How this run gets each chunk, decided by the first partition to reach it.
    runs: Vec<OnceLock<ChunkRun>>,
}

#[derive(Debug)]
enum ChunkRun {
    /// An earlier run committed it: its files are read.
    Read,
    /// Computed, and spooled to `temporary` (renamed to the chunk's directory by the last of
    /// its partitions to finish), unless a partition ended before its task was old enough to
    /// spool (`SPOOL_AFTER`).
    Compute {
        temporary: PathBuf,
        left: AtomicUsize,
        unspooled: AtomicBool,
    },
}

#[derive(Debug)]
pub struct SpoolExec {
    input: Arc<dyn ExecutionPlan>,
    /// The scan's spool directory.
    dir: PathBuf,
    stage: usize,
    /// The stage reads no other stage (its tasks may be cut in chunks, see `chunks`).
    leaf: bool,
    /// Its tasks' shared state, by task directory (a plan a process runs for several tasks
    /// is one node for them all).
    tasks: Mutex<HashMap<PathBuf, Arc<Task>>>,
    /// How old a task is when it starts writing its files (`SPOOL_AFTER`).
    spool_after: Duration,
}

impl SpoolExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, dir: PathBuf, stage: usize, leaf: bool) -> Self {
        Self {
            input,
            dir,
            stage,
            leaf,
            tasks: Mutex::default(),
            spool_after: SPOOL_AFTER,
        }
    }

    /// This node spooling its tasks from `age` on (tests: from the start).
    #[cfg(test)]
    fn spooling_after(mut self, age: Duration) -> Self {
        self.spool_after = age;
        self
    }

    /// The directory of this task of this stage.
    fn task_dir(&self, ctx: &Arc<TaskContext>) -> PathBuf {
        let task = DistributedTaskContext::from_ctx(ctx);
        self.dir
            .join(format!("stage-{}", self.stage))
            .join(format!("task-{}-of-{}", task.task_index, task.task_count))
    }

    /// This leaf task's chunks, or None for a task that is not cut.
    fn chunks(&self, task: &Task, ctx: &Arc<TaskContext>) -> Option<Arc<Chunks>> {
        let made = task.chunks.get_or_init(|| {
            if !self.leaf {
                return None;
            }
            let index = DistributedTaskContext::from_ctx(ctx).task_index;
            let options = ctx.session_config().options();
            let plans = chunks::chunks(&self.input, index, chunks::chunk_bytes(options))?;
            let runs = plans.iter().map(|_| OnceLock::new()).collect();
            Some(Arc::new(Chunks {
                plans,
                started: Instant::now(),
                runs,
            }))
        });
        made.clone()
    }
}

fn file_of(task_dir: &Path, partition: usize) -> PathBuf {
    task_dir.join(format!("{partition}.arrow"))
}

fn chunk_dir(task_dir: &Path, chunk: usize) -> PathBuf {
    task_dir.join(format!("chunk-{chunk}"))
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
        let schema = self.input.schema();
        let task = {
            let mut tasks = self.tasks.lock().expect("poisoned");
            Arc::clone(tasks.entry(task_dir.clone()).or_default())
        };
        let parts = self.input.output_partitioning().partition_count();
        if let Some(chunks) = self.chunks(&task, &ctx) {
            let spool_from = chunks.started + self.spool_after;
            let at = (partition, parts, spool_from);
            return Ok(chunked(chunks, task_dir, at, ctx, schema));
        }
        let reuse = *task
            .reuse
            .get_or_init(|| (0..parts).all(|p| file_of(&task_dir, p).exists()));
        let file = file_of(&task_dir, partition);
        if reuse {
            return read(file, schema);
        }
        let rows = self.input.execute(partition, ctx)?;
        let spool_from = *task.started.get_or_init(Instant::now) + self.spool_after;
        Ok(tee(rows, task_dir, file, spool_from, None))
    }
}

/// Partition `partition` of a task cut in chunks: each chunk's partition in turn, read from
/// the spool when an earlier run committed the chunk, computed (and spooled) otherwise.
/// `at`: the partition, the task's partition count, and when its files start.
fn chunked(
    chunks: Arc<Chunks>,
    task_dir: PathBuf,
    (partition, parts, spool_from): (usize, usize, Instant),
    ctx: Arc<TaskContext>,
    schema: SchemaRef,
) -> SendableRecordBatchStream {
    let out = Arc::clone(&schema);
    let batches = futures::stream::iter(0..chunks.plans.len())
        .map(move |c| {
            let dir = chunk_dir(&task_dir, c);
            let run = chunks.runs[c].get_or_init(|| match dir.exists() {
                true => ChunkRun::Read,
                false => ChunkRun::Compute {
                    temporary: task_dir.join(format!("chunk-{c}.tmp-{}", uuid::Uuid::new_v4())),
                    left: AtomicUsize::new(parts),
                    unspooled: AtomicBool::new(false),
                },
            });
            let temporary = match run {
                ChunkRun::Read => return read(file_of(&dir, partition), Arc::clone(&out)),
                ChunkRun::Compute { temporary, .. } => temporary.clone(),
            };
            let rows = chunks.plans[c].execute(partition, Arc::clone(&ctx))?;
            // The last partition of the chunk to finish commits the chunk, if all spooled.
            let (chunks, at) = (Arc::clone(&chunks), temporary.clone());
            let commit = Box::new(move |spooled: bool| match &chunks.runs[c].get() {
                Some(ChunkRun::Compute {
                    left, unspooled, ..
                }) => {
                    unspooled.fetch_or(!spooled, Ordering::AcqRel);
                    match left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        false => Ok(()),
                        true if unspooled.load(Ordering::Acquire) => {
                            let _ = std::fs::remove_dir_all(&at);
                            Ok(())
                        }
                        true => commit_dir(&at, &dir),
                    }
                }
                _ => Ok(()),
            });
            Ok(tee(
                rows,
                temporary.clone(),
                file_of(&temporary, partition),
                spool_from,
                Some(commit),
            ))
        })
        .map(|chunk| match chunk {
            Ok(stream) => stream,
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// Renames a chunk's finished temporary directory into place; when another run committed the
/// chunk first, its files stand.
fn commit_dir(temporary: &Path, dir: &Path) -> Result<()> {
    match std::fs::rename(temporary, dir) {
        Err(_) if dir.exists() => std::fs::remove_dir_all(temporary).map_err(Into::into),
        done => done.map_err(Into::into),
    }
}

/// `rows` passed on as they come, each batch also written to a temporary file that is renamed
/// to `file` after the last, so that a file there is a whole partition. Batches before
/// `spool_from` are held, and written then; a partition that ends before it is not spooled.
fn tee(
    rows: SendableRecordBatchStream,
    dir: PathBuf,
    file: PathBuf,
    spool_from: Instant,
    then: Option<Committed>,
) -> SendableRecordBatchStream {
    let schema = rows.schema();
    let teed = Teed {
        writer: None,
        held: Some(Vec::new()),
        held_bytes: 0,
        spool_from,
        schema: Arc::clone(&schema),
        dir,
        temporary: file.with_extension(format!("tmp-{}", uuid::Uuid::new_v4())),
        file,
        then,
    };
    let teeing = Teeing(Some((rows, teed)));
    let batches = futures::stream::unfold(teeing, |mut teeing| async move {
        let (rows, teed) = teeing.0.as_mut()?;
        match rows.next().await {
            Some(Ok(batch)) => match teed.write(&batch) {
                Ok(()) => Some((Ok(batch), teeing)),
                Err(e) => Some((Err(e), Teeing(None))),
            },
            Some(Err(e)) => Some((Err(e), Teeing(None))),
            None => {
                let (_, mut teed) = teeing.0.take()?;
                teed.commit().err().map(|e| (Err(e), Teeing(None)))
            }
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// A partition's rows and their file, being passed on. Dropped before the end (its reader
/// gone: a lost run, a cancel), a chunk's partition is written to its end in the background,
/// so that the chunk a lost run had begun is there for the next (a chunk is a few MB of
/// input: little is spent when no run comes).
struct Teeing(Option<(SendableRecordBatchStream, Teed)>);

impl Drop for Teeing {
    fn drop(&mut self) {
        let Some((mut rows, mut teed)) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if teed.then.is_none() {
            return;
        }
        runtime.spawn(async move {
            while let Some(batch) = rows.next().await {
                let Ok(()) = batch.and_then(|b| teed.write(&b)) else {
                    return;
                };
            }
            if let Err(e) = teed.commit() {
                log::info!("spooling a chunk after its reader left: {e}");
            }
        });
    }
}

/// A partition being written beside its stream; its temporary file is removed unless it was
/// committed (a stream dropped or failed half-way leaves nothing).
struct Teed {
    writer: Option<StreamWriter<BufWriter<File>>>,
    /// The batches passed on before `spool_from`, while no file is open (None once it is).
    held: Option<Vec<RecordBatch>>,
    held_bytes: usize,
    spool_from: Instant,
    schema: SchemaRef,
    /// Where `temporary` is made (created with the first file in it).
    dir: PathBuf,
    temporary: PathBuf,
    file: PathBuf,
    then: Option<Committed>,
}

/// What a partition does once it ended, told whether its file is in place (a chunk's last
/// partition commits the chunk when all are).
type Committed = Box<dyn FnOnce(bool) -> Result<()> + Send>;

impl Teed {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if let Some(held) = &mut self.held {
            held.push(batch.clone());
            self.held_bytes += batch.get_array_memory_size();
            return match self.held_bytes > HOLD_BYTES {
                true => self.open(),
                false => self.open_when_due(),
            };
        }
        match &mut self.writer {
            Some(writer) => Ok(writer.write(batch)?),
            None => Ok(()),
        }
    }

    /// Opens the file and writes the held batches, once `spool_from` has passed.
    fn open_when_due(&mut self) -> Result<()> {
        match Instant::now() < self.spool_from {
            true => Ok(()),
            false => self.open(),
        }
    }

    fn open(&mut self) -> Result<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        std::fs::create_dir_all(&self.dir)?;
        let f = File::create(&self.temporary)?;
        let writer = StreamWriter::try_new(BufWriter::with_capacity(IO_BUFFER, f), &self.schema)?;
        let writer = self.writer.insert(writer);
        for batch in &held {
            writer.write(batch)?;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        self.open_when_due()?;
        let spooled = self.writer.is_some();
        if let Some(mut writer) = self.writer.take() {
            writer.finish()?;
            drop(writer);
            std::fs::rename(&self.temporary, &self.file)?;
        }
        match self.then.take() {
            Some(then) => then(spooled),
            None => Ok(()),
        }
    }
}

impl Drop for Teed {
    fn drop(&mut self) {
        if self.writer.take().is_some() {
            let _ = std::fs::remove_file(&self.temporary);
        }
    }
}

/// The batches of a spooled partition.
fn read(file: PathBuf, schema: SchemaRef) -> Result<SendableRecordBatchStream> {
    let opened = File::open(&file)
        .map_err(|e| exec_datafusion_err!("spooled partition {}: {e}", file.display()))?;
    let reader = StreamReader::try_new(BufReader::with_capacity(IO_BUFFER, opened), None)?;
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
        // A task that ends before it is old enough to spool leaves no file.
        let young = SpoolExec::new(rows(&[&[5], &[6]]), dir.clone(), 1, true);
        assert_eq!(run(&young).await, vec![vec![5], vec![6]]);
        assert!(!dir.exists());
        let spooling =
            |plan| SpoolExec::new(plan, dir.clone(), 1, true).spooling_after(Duration::ZERO);
        let first = spooling(rows(&[&[1, 2], &[3]]));
        assert_eq!(run(&first).await, vec![vec![1, 2], vec![3]]);
        // Another run with the same split finds the task's files: read, not computed.
        let again = spooling(rows(&[&[7], &[8]]));
        assert_eq!(run(&again).await, vec![vec![1, 2], vec![3]]);
        // A partition's file missing: the task is computed again, all of it.
        let task_dir = dir.join("stage-1").join("task-0-of-1");
        std::fs::remove_file(file_of(&task_dir, 1)).unwrap();
        let partial = spooling(rows(&[&[7], &[8]]));
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

    /// A partition begun before `spool_from` holds its batches and writes them all once it
    /// passes; one that ends before it leaves no file and says so.
    #[test]
    fn batches_before_the_spool_starts_are_held_then_written() {
        let dir = std::env::temp_dir().join(format!("dfdpy-spool-test-{}", uuid::Uuid::new_v4()));
        let batch = |v: i64| {
            let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
            let col = Arc::new(Int64Array::from(vec![v])) as _;
            RecordBatch::try_new(schema, vec![col]).unwrap()
        };
        let teed = |name: &str, spool_from: Instant, said: Arc<Mutex<Option<bool>>>| Teed {
            writer: None,
            held: Some(Vec::new()),
            held_bytes: 0,
            spool_from,
            schema: batch(0).schema(),
            dir: dir.join("chunk.tmp"),
            temporary: dir.join(format!("{name}.tmp")),
            file: dir.join(name),
            then: Some(Box::new(move |spooled| {
                *said.lock().unwrap() = Some(spooled);
                Ok(())
            })),
        };
        let late = Arc::new(Mutex::new(None));
        let mut t = teed(
            "late",
            Instant::now() + Duration::from_secs(3600),
            Arc::clone(&late),
        );
        t.write(&batch(1)).unwrap();
        t.commit().unwrap();
        assert_eq!(*late.lock().unwrap(), Some(false));
        assert!(!dir.join("late").exists());

        let due = Arc::new(Mutex::new(None));
        let mut t = teed(
            "due",
            Instant::now() + Duration::from_millis(30),
            Arc::clone(&due),
        );
        t.write(&batch(1)).unwrap();
        assert!(t.writer.is_none());
        std::thread::sleep(Duration::from_millis(40));
        t.write(&batch(2)).unwrap();
        t.commit().unwrap();
        assert_eq!(*due.lock().unwrap(), Some(true));
        let read: Vec<i64> = StreamReader::try_new(File::open(dir.join("due")).unwrap(), None)
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let col = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .clone();
                col.values().to_vec()
            })
            .collect();
        assert_eq!(read, vec![1, 2]);
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
