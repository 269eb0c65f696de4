//! `DistributedTable`: a planned distributed query as a DataFusion table provider.
//!
//! datafusion-python scans it through FFI: `ctx.read_table(plan)` gives an ordinary, lazy
//! `datafusion.DataFrame`, and each scan (each `collect`, `show`, `execute_stream`...) plans
//! the query afresh for the current workers and runs it — again, on the workers left, when a
//! worker is lost before the first batch reached the caller (see `root`).
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{collect, collect_partitioned, ExecutionPlan};

use super::planner::{ClusterPlanner, PlanRequest, Planned};
use super::query::{project, FailureRecord, Query, Run};
use super::root::DistributedRootExec;
use super::step_clock::StepClock;
use crate::protocol::task_headers::TaskTrace;

pub struct DistributedTable {
    query: Arc<Query>,
    /// The plan made when the query was submitted: shown by `explain`.
    planned: Arc<dyn ExecutionPlan>,
    /// Its row count, when its statistics know it exactly.
    exact_rows: Option<usize>,
    /// That plan, not run yet: the first scan runs it when the worker set is still the one it
    /// was planned for, instead of planning again (a plan runs at most once: its nodes hold
    /// run state such as join builds and dynamic filters).
    unused: Mutex<Option<Planned>>,
    /// The steps of planning it at submission, then of the latest run read whole.
    steps: Mutex<StepClock>,
    /// How that plan's joins were planned from their inputs' real sizes.
    decisions: Vec<String>,
    /// Why the plan made at submission has fewer tasks per stage than workers (`load`).
    sizing: Option<String>,
}

impl std::fmt::Debug for DistributedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedTable").finish_non_exhaustive()
    }
}

impl DistributedTable {
    pub fn new(planner: Arc<ClusterPlanner>, request: Arc<PlanRequest>, planned: Planned) -> Self {
        let query = Query::new(planner, request);
        query
            .repeatable
            .store(planned.repeatable, Ordering::Relaxed);
        *query.spool.lock().expect("poisoned") = planned.spool.clone();
        Self {
            query: Arc::new(query),
            planned: Arc::clone(&planned.plan),
            exact_rows: planned.exact_rows,
            steps: Mutex::new(planned.clock.clone()),
            decisions: planned.log.decisions(),
            sizing: planned.log.sizing(),
            unused: Mutex::new(Some(planned)),
        }
    }

    /// The plan made at submission, if it was not run yet and the worker set is unchanged.
    fn take_unused(&self) -> Option<Planned> {
        let planned = self.unused.lock().expect("poisoned").take()?;
        let now = self.query.planner.urls().ok()?;
        (now == planned.workers).then_some(planned)
    }

    /// The plan made when the query was submitted (what `explain` shows).
    pub fn planned(&self) -> &Arc<dyn ExecutionPlan> {
        &self.planned
    }

    /// How the plan made at submission planned its joins from their inputs' real sizes.
    pub fn decisions(&self) -> &[String] {
        &self.decisions
    }

    /// Why the plan made at submission has fewer tasks per stage than workers, if it does.
    pub fn sizing(&self) -> Option<&str> {
        self.sizing.as_deref()
    }

    /// The query's row count, when the statistics of the plan made at submission know it
    /// exactly.
    pub fn exact_rows(&self) -> Option<usize> {
        self.exact_rows
    }

    /// How long each step took: planning at submission, then (once read whole) starting
    /// the latest run and running it.
    pub fn steps(&self) -> Vec<(&'static str, std::time::Duration)> {
        self.steps.lock().expect("poisoned").steps().to_vec()
    }

    /// The latest run of the query and its task log, if it ran.
    pub fn last_run(&self) -> Option<Run> {
        self.runs().pop()
    }

    /// Every run of the latest scan, in order (more than one after retries).
    pub fn runs(&self) -> Vec<Run> {
        self.query.runs.lock().expect("poisoned").clone()
    }

    /// The worker failure the latest scan ended with (`(worker, kind, message)`), if any.
    pub fn last_failure(&self) -> Option<FailureRecord> {
        self.query.failure.lock().expect("poisoned").clone()
    }

    /// A new run of the query (a scan), projected to `projection`: the plan made at
    /// submission when it was not run yet and the worker set is unchanged, else a new one;
    /// after `Query::may_run_again`, the next run of the scan that failed.
    pub async fn start(&self, projection: Option<&Vec<usize>>) -> Result<Arc<DistributedRootExec>> {
        let attempt = self.query.next_attempt();
        *self.query.failure.lock().expect("poisoned") = None;
        let unused = match attempt {
            1 => self.take_unused(),
            _ => None,
        };
        let (plan, task_ctx) = match unused {
            Some(Planned {
                plan,
                task_ctx,
                log,
                ..
            }) => {
                log.set_trace(self.query.trace.lock().expect("poisoned").clone());
                let mut runs = self.query.runs.lock().expect("poisoned");
                runs.clear();
                runs.push((Arc::clone(&plan), log));
                (project(plan, projection)?, task_ctx)
            }
            None => self
                .query
                .plan_run(attempt, projection)
                .await
                .map_err(|e| self.query.failed(e))?,
        };
        Ok(Arc::new(DistributedRootExec::new(
            plan,
            task_ctx,
            Arc::clone(&self.query),
            projection.cloned(),
            attempt,
        )))
    }

    /// Runs the query to its end and gathers its rows (one list per output partition when
    /// `partitioned`, else one). Nothing is handed on before the end, so a worker lost at any
    /// point costs a run from the start on the workers left (up to `max_retries`), the rows
    /// of the failed run dropped; not the query.
    pub async fn collect_whole(
        &self,
        partitioned: bool,
    ) -> Result<(SchemaRef, Vec<Vec<RecordBatch>>)> {
        loop {
            let mut clock = self.steps.lock().expect("poisoned").clone();
            clock.restart();
            let root = self.start(None).await?;
            clock.lap("start run");
            let (schema, ctx) = (root.schema(), root.task_ctx());
            let parts = match partitioned {
                true => collect_partitioned(root, ctx).await,
                false => collect(root, ctx).await.map(|batches| vec![batches]),
            };
            clock.lap("run");
            *self.steps.lock().expect("poisoned") = clock;
            match parts {
                Err(_) if self.query.may_run_again() => continue,
                parts => {
                    self.query.end_scan(); // read whole: its spool is not read again
                    return parts.map(|parts| (schema, parts));
                }
            }
        }
    }

    /// The first rows of the result as datafusion-python's formatter shows a frame: read
    /// partition after partition until `max_rows` rows or `max_bytes` bytes (their in-memory
    /// size as DataFusion estimates it, at least `min_rows` rows), the rest of the run then
    /// dropped; and whether more rows were left. The same rule as the formatter's own
    /// (`collect_record_batches_to_display` in datafusion-python), applied where the rows
    /// arrive, so a distributed stream stops where a single-node one does.
    pub async fn collect_to_display(
        &self,
        max_bytes: usize,
        min_rows: usize,
        max_rows: usize,
    ) -> Result<(SchemaRef, Vec<RecordBatch>, bool)> {
        loop {
            let root = self.start(None).await?;
            let (schema, ctx) = (root.schema(), root.task_ctx());
            match first_rows(root, ctx, max_bytes, min_rows, max_rows).await {
                Err(_) if self.query.may_run_again() => continue,
                shown => return shown.map(|(batches, more)| (schema, batches, more)),
            }
        }
    }

    /// After a run failed: whether the caller may run the query again (see
    /// `Query::may_run_again`); the next scan is then that run.
    pub fn may_run_again(&self) -> bool {
        self.query.may_run_again()
    }

    /// Lets the query run again when a worker is lost (the default), or not.
    pub fn set_retries(&self, on: bool) {
        self.query.retries_on.store(on, Ordering::Relaxed);
    }

    /// Sends the tasks of the next runs under this W3C `traceparent` (None: untraced).
    pub fn set_trace_parent(&self, traceparent: Option<&str>) {
        let trace = traceparent.and_then(TaskTrace::parse);
        *self.query.trace.lock().expect("poisoned") = trace;
    }
}

#[async_trait]
impl TableProvider for DistributedTable {
    fn schema(&self) -> SchemaRef {
        self.planned.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self.start(projection).await?)
    }
}

/// The formatter's rule (see [`DistributedTable::collect_to_display`]) over `plan`'s
/// partitions, read one after another.
async fn first_rows(
    plan: Arc<dyn ExecutionPlan>,
    ctx: Arc<datafusion::execution::TaskContext>,
    max_bytes: usize,
    min_rows: usize,
    max_rows: usize,
) -> Result<(Vec<RecordBatch>, bool)> {
    use futures::StreamExt;
    let batch_size = ctx.session_config().batch_size();
    let partitions = plan.properties().partitioning.partition_count();
    let streams = (0..partitions)
        .map(|p| plan.execute(p, Arc::clone(&ctx)))
        .collect::<Result<Vec<_>>>()?;
    let mut stream = futures::stream::iter(streams).flatten();
    let (mut bytes, mut rows, mut more) = (0usize, 0usize, false);
    let mut batches = Vec::new();
    while (bytes < max_bytes && rows < max_rows) || rows < min_rows {
        let Some(batch) = stream.next().await else {
            break;
        };
        let mut batch = batch?;
        if batch.num_rows() == 0 {
            continue;
        }
        bytes += display_bytes(&batch, batch_size);
        if bytes > max_bytes {
            // Over the budget: as many rows as its share of the bytes, at least `min_rows`.
            let total = rows + batch.num_rows();
            let share = (total as f64 * max_bytes as f64 / bytes as f64).round() as usize;
            let keep = share.max(min_rows.min(total)).saturating_sub(rows);
            if keep < batch.num_rows() {
                batch = batch.slice(0, keep);
                more = true;
            }
        }
        if rows + batch.num_rows() > max_rows {
            batch = batch.slice(0, max_rows - rows);
            more = true;
        }
        rows += batch.num_rows();
        batches.push(batch);
    }
    if batches.is_empty() {
        return Ok((batches, false));
    }
    if !more {
        more = matches!(stream.next().await, Some(Ok(_)));
    }
    Ok((batches, more))
}

/// The bytes the formatter counts `batch` for: its memory, and a batch shorter than
/// `batch_size` up to twice that (at most a full batch's worth). Single-node's short batches
/// are commonly built row by row, or the remainder a coalescer sliced off, and hold buffers
/// grown by doubling, which they count; ours crossed tasks compacted. Counted so, the
/// embedded cluster's display stops where single-node's does (worker processes' batches
/// count the whole message they arrived in, so theirs stops sooner).
fn display_bytes(batch: &RecordBatch, batch_size: usize) -> usize {
    let (bytes, rows) = (batch.get_array_memory_size(), batch.num_rows().max(1));
    match rows < batch_size {
        true => (2 * bytes).min(bytes * batch_size / rows),
        false => bytes,
    }
}
