//! `Query`: what every run of one distributed query shares — how to plan it, the runs of its
//! latest scan, whether a lost worker may cost a retry, and the failure it ended with.
//!
//! The table (`table`) starts runs of it; the root node (`root`) runs them and, when a worker
//! is lost before the first batch, plans the next one. Both depend on this file, not on each
//! other.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::common::{exec_datafusion_err, DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

use super::load::Running;
use super::planner::{ClusterPlanner, PlanRequest, Planned};
use super::task_log::TaskLog;
use crate::errors::{as_worker_failure, worker_lost, FailureKind};
use crate::protocol::task_headers::TaskTrace;
use crate::runtime;
use crate::spool::Spool;

/// A run of the query: the plan executed and where its tasks went.
pub type Run = (Arc<dyn ExecutionPlan>, Arc<TaskLog>);

/// What every run of one query shares: how to plan it, and the runs of its latest scan.
pub struct Query {
    pub(super) planner: Arc<ClusterPlanner>,
    request: Arc<PlanRequest>,
    /// The runs of the latest scan: one, or more when lost workers made it run again.
    pub(super) runs: Mutex<Vec<Run>>,
    /// Off while the result is being written by the caller (`write_parquet` on the
    /// coordinator...): such a run is never repeated.
    pub(super) retries_on: AtomicBool,
    /// Whether a run may be repeated at all: false for a write that puts files in place as it
    /// goes (see `Planned::repeatable`).
    pub(super) repeatable: AtomicBool,
    /// Set when a run failed on a lost worker and the caller runs the query again from the
    /// start (see `may_run_again`): the next scan is the next run of this one, not a new scan.
    continuing: AtomicBool,
    /// Where the current scan's runs spool (`fault_tolerance="task"`): a run after a lost
    /// worker reads what the tasks of the runs before it finished.
    pub(super) spool: Mutex<Option<Spool>>,
    /// The number of runs when `may_run_again` last said yes.
    granted_at: AtomicUsize,
    /// The worker failure the latest scan ended with, as data: its text crosses FFI alone.
    pub(super) failure: Mutex<Option<FailureRecord>>,
    /// The trace context the next runs' tasks are sent with (see `protocol::task_headers`).
    pub(super) trace: Mutex<Option<TaskTrace>>,
    /// Counts it among the queries running on its workers while its result is read (`load`).
    reading: Mutex<std::sync::Weak<Running>>,
}

/// A worker failure as Python's `WorkerError` carries it: the worker, the kind, the message.
pub type FailureRecord = (Option<String>, &'static str, String);

impl Query {
    pub fn new(planner: Arc<ClusterPlanner>, request: Arc<PlanRequest>) -> Self {
        Self {
            planner,
            request,
            runs: Mutex::default(),
            retries_on: AtomicBool::new(true),
            repeatable: AtomicBool::new(true),
            continuing: AtomicBool::new(false),
            spool: Mutex::default(),
            granted_at: AtomicUsize::new(usize::MAX),
            failure: Mutex::default(),
            trace: Mutex::default(),
            reading: Mutex::default(),
        }
    }

    /// Held while a stream of its result is read: the partitions of a run share one.
    pub fn reading(&self) -> Arc<Running> {
        let mut reading = self.reading.lock().expect("poisoned");
        if let Some(running) = reading.upgrade() {
            return running;
        }
        let running = Arc::new(Running::start(self.planner.urls().unwrap_or_default()));
        *reading = Arc::downgrade(&running);
        running
    }

    /// `err`, remembered as the scan's failure when it is a worker's.
    pub fn failed(&self, err: DataFusionError) -> DataFusionError {
        if let Some(f) = as_worker_failure(&err) {
            let record = (f.worker.clone(), f.kind.name(), f.to_string());
            *self.failure.lock().expect("poisoned") = Some(record);
        }
        err
    }
}

impl Query {
    /// Plans run number `attempt` of the query (1 starts a new scan), projected as the scan
    /// asked, and records it.
    pub async fn plan_run(
        self: &Arc<Self>,
        attempt: usize,
        projection: Option<&Vec<usize>>,
    ) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>)> {
        // A new scan starts its own spool; a run again of one reads what its runs spooled.
        let spool = match attempt {
            1 => {
                self.end_scan();
                None
            }
            _ => self.spool.lock().expect("poisoned").clone(),
        };
        // datafusion-python polls this future on its own runtime: plan on ours.
        let this = Arc::clone(self);
        let Planned {
            plan,
            task_ctx,
            log,
            spool,
            ..
        } = runtime::handle()
            .spawn(async move {
                let planning = this.planner.plan_spooled(&this.request, attempt, spool);
                planning.await
            })
            .await
            .map_err(|e| exec_datafusion_err!("planning task failed: {e}"))??;
        *self.spool.lock().expect("poisoned") = spool;
        log.set_trace(self.trace.lock().expect("poisoned").clone());
        {
            let mut runs = self.runs.lock().expect("poisoned");
            if attempt == 1 {
                runs.clear();
            }
            runs.push((Arc::clone(&plan), log));
        }
        Ok((project(plan, projection)?, task_ctx))
    }

    /// The current scan is over: its spooled files are removed.
    pub fn end_scan(&self) {
        if let Some(spool) = self.spool.lock().expect("poisoned").take() {
            spool.remove();
        }
    }

    /// How long a reader may wait while nothing of the query moves (None: forever).
    pub fn stall_timeout(&self) -> Option<std::time::Duration> {
        self.request.stall_timeout
    }

    /// Runs after the first a lost worker may cost; 0 while retries are off.
    pub fn max_retries(&self) -> usize {
        let on = self.retries_on.load(Ordering::Relaxed) && self.repeatable.load(Ordering::Relaxed);
        match on {
            true => self.request.max_retries,
            false => 0,
        }
    }

    /// After a run failed on a lost worker, wherever its rows were by then: whether the
    /// caller, who has handed none of them on (`collect`, a keeping run, a staged write), may
    /// drop them and run the query again on the workers left — runs are left, and the failure
    /// is a lost worker, not the query's own. If so the retry is announced (a warning, a
    /// `retry` progress event) and the next scan continues this one, as run `n + 1`.
    pub fn may_run_again(&self) -> bool {
        let Some((worker, kind, message)) = self.failure.lock().expect("poisoned").clone() else {
            return false;
        };
        let runs = self.runs.lock().expect("poisoned").len();
        // Once per run: a run again that could not even start (no worker left) is not retried.
        let first_ask = self.granted_at.swap(runs, Ordering::Relaxed) != runs;
        if !first_ask
            || !FailureKind::named(kind).is_some_and(FailureKind::is_lost)
            || runs > self.max_retries()
        {
            return false;
        }
        log::warn!(
            "{message}: running the query again on the workers left, from the start (run {} \
             of at most {})",
            runs + 1,
            self.max_retries() + 1
        );
        if let Some(log) = self.latest_log() {
            log.retrying(worker.as_deref().unwrap_or_default());
        }
        self.continuing.store(true, Ordering::Relaxed);
        true
    }

    /// The number the next scan's run takes: 1 for a new scan, `n + 1` when it continues one
    /// that failed (see `may_run_again`).
    pub fn next_attempt(&self) -> usize {
        match self.continuing.swap(false, Ordering::Relaxed) {
            true => self.runs.lock().expect("poisoned").len() + 1,
            false => {
                self.granted_at.store(usize::MAX, Ordering::Relaxed);
                1
            }
        }
    }

    /// The lost worker behind `err`, a worker failure: found by asking every worker; `err`
    /// itself when none is found (or it is something else).
    pub async fn name_lost_peer(&self, err: DataFusionError) -> DataFusionError {
        // A lost worker also breaks the streams of the others (reset, cancelled): ask them
        // all, and name the one that is really gone.
        if !as_worker_failure(&err).is_some_and(|f| f.lost()) {
            return err;
        }
        let planner = Arc::clone(&self.planner);
        let found = runtime::handle()
            .spawn(async move { planner.find_lost().await })
            .await
            .ok()
            .flatten();
        let (Some(found), Some(failure)) = (found, as_worker_failure(&err)) else {
            return err;
        };
        let Some((lost, probed)) =
            as_worker_failure(&found).and_then(|f| Some((f.worker.clone()?, f)))
        else {
            return err;
        };
        // A broken stream reads the same whether its worker died or froze (h2 ends them
        // alike); a probe that gets no answer at all tells the frozen one.
        let froze = probed.kind == FailureKind::StoppedAnswering;
        if failure.worker.as_deref() == Some(lost.as_str()) {
            if froze && failure.kind != FailureKind::StoppedAnswering {
                return worker_lost(&lost, probed.kind, probed.what.clone());
            }
            return err;
        }
        if froze {
            return worker_lost(&lost, probed.kind, probed.what.clone());
        }
        // It died mid-query; the probe only found it gone (refused, reset): say it as what
        // happened, without the probe's hints, which are for a worker never reached.
        let cause = match probed.kind {
            FailureKind::Unreachable => "it no longer accepts connections",
            _ => "connection reset",
        };
        worker_lost(&lost, FailureKind::Died, format!("died ({cause})"))
    }

    /// `err`, a worker called dead (its stream reset or closed), as the query's own error
    /// when that worker and every other still answer; None when a worker is really lost (or
    /// `err` says something else: a worker that lost a peer names the peer), so that the run
    /// may be retried.
    pub async fn failed_while_alive(&self, err: &DataFusionError) -> Option<DataFusionError> {
        let failure = as_worker_failure(err).filter(|f| f.kind == FailureKind::Died)?;
        let worker = failure.worker.clone()?;
        let planner = Arc::clone(&self.planner);
        let named = worker.clone();
        let alive = runtime::handle()
            .spawn(async move { planner.every_worker_answers(&named).await })
            .await
            .unwrap_or(false);
        alive.then(|| {
            exec_datafusion_err!(
                "the query failed on worker {worker}: its stream there broke off ({}), yet that \
                 worker and every other still answer, so the query itself failed on it, not \
                 the worker (not retried)",
                failure.what
            )
        })
    }

    /// The task log of the latest run.
    pub fn latest_log(&self) -> Option<Arc<TaskLog>> {
        let runs = self.runs.lock().expect("poisoned");
        runs.last().map(|(_, log)| Arc::clone(log))
    }
}

/// `plan` with only the `projection` columns, if given.
pub(super) fn project(
    plan: Arc<dyn ExecutionPlan>,
    projection: Option<&Vec<usize>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(projection) = projection else {
        return Ok(plan);
    };
    let schema = plan.schema();
    let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = projection
        .iter()
        .map(|&i| {
            let name = schema.field(i).name().clone();
            (
                Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>,
                name,
            )
        })
        .collect();
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}

impl Drop for Query {
    fn drop(&mut self) {
        self.end_scan();
    }
}
