//! The node datafusion-python sees: a leaf that runs our distributed plan.
//!
//! It has no children, so the stock planner never looks inside the distributed plan, and it
//! ignores the TaskContext that comes over FFI (whose config extensions and runtime are
//! defaults) in favour of the one built at planning time, which carries the worker and channel
//! resolvers and the object stores.
//!
//! It also owns the query-level retry within one stream: when a worker is lost (died, froze,
//! unreachable) before the first batch of a partition reached the caller, the query is
//! planned again — the lost worker is quarantined by then, so on the workers left — and run
//! again, up to `max_retries` times. After that, a caller that has handed no row on runs the
//! whole query again itself (`DistributedTable::collect_whole`, `Query::may_run_again`).
//! Errors of the query itself, refused credentials and writes that put files in place as
//! they go are never repeated.
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

use super::empty_batches::passes_on_an_empty_batch;
use super::query::Query;
use super::stall_guard::StallGuard;
use crate::errors::{as_worker_failure, is_worker_lost};

#[derive(Debug)]
pub struct DistributedRootExec {
    inner: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
    query: Arc<Query>,
    projection: Option<Vec<usize>>,
    /// Which run of the query `inner` is (1 for the first).
    attempt: usize,
}

impl std::fmt::Debug for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Query").finish_non_exhaustive()
    }
}

impl DistributedRootExec {
    pub fn new(
        inner: Arc<dyn ExecutionPlan>,
        task_ctx: Arc<TaskContext>,
        query: Arc<Query>,
        projection: Option<Vec<usize>>,
        attempt: usize,
    ) -> Self {
        Self {
            inner,
            task_ctx,
            query,
            projection,
            attempt,
        }
    }

    /// The task context the plan runs with (the one an FFI caller passes is ignored).
    pub fn task_ctx(&self) -> Arc<TaskContext> {
        Arc::clone(&self.task_ctx)
    }
}

impl DisplayAs for DistributedRootExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DistributedRootExec: {}", self.inner.name())
    }
}

/// One partition's stream and what a retry needs.
struct Attempt {
    stream: SendableRecordBatchStream,
    attempt: usize,
    delivered: bool,
    done: bool,
    /// Give the caller an empty batch if the run delivers none (see `empty_batches`).
    empty_batch: Option<RecordBatch>,
    partition: usize,
    query: Arc<Query>,
    projection: Option<Vec<usize>>,
    /// Fails a wait for the next batch during which nothing of the query moves.
    guard: Option<StallGuard>,
    /// Counts the query as running on its workers until its streams are done (`load`):
    /// dropped when the run ends, failed or not, even if the reader keeps the stream.
    reading: Option<Arc<super::load::Running>>,
}

impl Attempt {
    /// Whether `err` may be answered by running the query again.
    fn may_retry(&self, err: &DataFusionError) -> bool {
        // A kept table's part missing on its holder (restarted since): made again, then rerun.
        !self.delivered
            && self.attempt <= self.query.max_retries()
            && (is_worker_lost(err) || crate::kept::mark_stale(err))
    }

    /// Plans and starts the next run of the query, for this partition.
    async fn next_run(&mut self, err: &DataFusionError) -> Result<()> {
        let failure = as_worker_failure(err);
        let worker = failure.and_then(|f| f.worker.clone()).unwrap_or_default();
        log::warn!(
            "{}: running the query again on the workers left (run {} of at most {})",
            failure.map_or_else(|| err.to_string(), |f| f.to_string()),
            self.attempt + 1,
            self.query.max_retries() + 1
        );
        if let Some(log) = self.query.latest_log() {
            log.retrying(&worker);
        }
        self.attempt += 1;
        let (plan, task_ctx) = self
            .query
            .plan_run(self.attempt, self.projection.as_ref())
            .await?;
        self.stream = plan.execute(self.partition, task_ctx)?;
        Ok(())
    }
}

impl ExecutionPlan for DistributedRootExec {
    crate::plan_nodes::leaf_node!("DistributedRootExec");

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn execute(
        &self,
        partition: usize,
        _foreign_ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.inner.schema();
        let restores = partition == 0 && passes_on_an_empty_batch(&self.inner);
        let first = Attempt {
            stream: self.inner.execute(partition, Arc::clone(&self.task_ctx))?,
            attempt: self.attempt,
            delivered: false,
            done: false,
            empty_batch: restores.then(|| RecordBatch::new_empty(Arc::clone(&schema))),
            partition,
            query: Arc::clone(&self.query),
            projection: self.projection.clone(),
            guard: (self.query.stall_timeout()).map(|t| StallGuard::start(&self.query, t)),
            reading: Some(self.query.reading()),
        };
        let batches = futures::stream::unfold(first, |mut run| async move {
            if run.done {
                return None;
            }
            loop {
                let next = match &run.guard {
                    Some(guard) => guard.next(&mut run.stream).await,
                    None => run.stream.next().await,
                };
                match next {
                    Some(Ok(batch)) => {
                        run.delivered = true;
                        return Some((Ok(batch), run));
                    }
                    Some(Err(e)) => {
                        // Not retried, nor called a dead worker, while every worker answers
                        // (also after rows were delivered: the caller may run it again).
                        let own = match is_worker_lost(&e) {
                            true => run.query.failed_while_alive(&e).await,
                            false => None,
                        };
                        if own.is_none() && run.may_retry(&e) {
                            if let Err(again) = run.next_run(&e).await {
                                run.done = true;
                                run.reading = None;
                                return Some((Err(run.query.failed(again)), run));
                            }
                            continue;
                        }
                        run.done = true;
                        run.reading = None;
                        let e = match own {
                            Some(own) => own,
                            None => run.query.name_lost_peer(e).await,
                        };
                        return Some((Err(run.query.failed(e)), run));
                    }
                    None => {
                        run.done = true;
                        run.reading = None;
                        let empty = run.empty_batch.take().filter(|_| !run.delivered);
                        return empty.map(|batch| (Ok(batch), run));
                    }
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.inner.metrics()
    }
}
