//! `DistributedTable`: a planned distributed query as a DataFusion table provider.
//!
//! datafusion-python scans it through FFI: `ctx.read_table(plan)` gives an ordinary, lazy
//! `datafusion.DataFrame`, and each scan (each `collect`, `show`, `execute_stream`...) plans
//! the query afresh for the current workers and runs it — again, on the workers left, when a
//! worker is lost before the first batch reached the caller (see `root`).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{exec_datafusion_err, DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

use super::planner::{ClusterPlanner, PlanRequest, Planned};
use super::root::DistributedRootExec;
use super::task_log::TaskLog;
use crate::errors::{as_worker_failure, worker_lost, FailureKind};
use crate::runtime;

/// A run of the query: the plan executed and where its tasks went.
pub type Run = (Arc<dyn ExecutionPlan>, Arc<TaskLog>);

/// What every run of one query shares: how to plan it, and the runs of its latest scan.
pub struct Query {
    planner: Arc<ClusterPlanner>,
    request: Arc<PlanRequest>,
    /// The runs of the latest scan: one, or more when lost workers made it run again.
    runs: Mutex<Vec<Run>>,
    /// Off while the result is being written (`write_parquet`...): such a run is never
    /// repeated.
    retries_on: AtomicBool,
    /// The worker failure the latest scan ended with, as data: its text crosses FFI alone.
    failure: Mutex<Option<FailureRecord>>,
}

/// A worker failure as Python's `WorkerError` carries it: the worker, the kind, the message.
pub type FailureRecord = (Option<String>, &'static str, String);

impl Query {
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
        // datafusion-python polls this future on its own runtime: plan on ours.
        let this = Arc::clone(self);
        let Planned {
            plan,
            task_ctx,
            log,
            ..
        } = runtime::handle()
            .spawn(async move { this.planner.plan(&this.request, attempt).await })
            .await
            .map_err(|e| exec_datafusion_err!("planning task failed: {e}"))??;
        {
            let mut runs = self.runs.lock().expect("poisoned");
            if attempt == 1 {
                runs.clear();
            }
            runs.push((Arc::clone(&plan), log));
        }
        Ok((project(plan, projection)?, task_ctx))
    }

    /// Runs after the first a lost worker may cost; 0 while retries are off.
    pub fn max_retries(&self) -> usize {
        match self.retries_on.load(Ordering::Relaxed) && !self.request.writes {
            true => self.request.max_retries,
            false => 0,
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

    /// The task log of the latest run.
    pub fn latest_log(&self) -> Option<Arc<TaskLog>> {
        let runs = self.runs.lock().expect("poisoned");
        runs.last().map(|(_, log)| Arc::clone(log))
    }
}

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
}

impl std::fmt::Debug for DistributedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedTable").finish_non_exhaustive()
    }
}

impl DistributedTable {
    pub fn new(planner: Arc<ClusterPlanner>, request: Arc<PlanRequest>, planned: Planned) -> Self {
        Self {
            query: Arc::new(Query {
                planner,
                request,
                runs: Mutex::default(),
                retries_on: AtomicBool::new(true),
                failure: Mutex::default(),
            }),
            planned: Arc::clone(&planned.plan),
            exact_rows: planned.exact_rows,
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

    /// The query's row count, when the statistics of the plan made at submission know it
    /// exactly.
    pub fn exact_rows(&self) -> Option<usize> {
        self.exact_rows
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
    /// submission when it was not run yet and the worker set is unchanged, else a new one.
    pub async fn start(&self, projection: Option<&Vec<usize>>) -> Result<Arc<DistributedRootExec>> {
        *self.query.failure.lock().expect("poisoned") = None;
        let (plan, task_ctx) = match self.take_unused() {
            Some(Planned {
                plan,
                task_ctx,
                log,
                ..
            }) => {
                let mut runs = self.query.runs.lock().expect("poisoned");
                runs.clear();
                runs.push((Arc::clone(&plan), log));
                (project(plan, projection)?, task_ctx)
            }
            None => self
                .query
                .plan_run(1, projection)
                .await
                .map_err(|e| self.query.failed(e))?,
        };
        Ok(Arc::new(DistributedRootExec::new(
            plan,
            task_ctx,
            Arc::clone(&self.query),
            projection.cloned(),
        )))
    }

    /// Lets the query run again when a worker is lost (the default), or not.
    pub fn set_retries(&self, on: bool) {
        self.query.retries_on.store(on, Ordering::Relaxed);
    }
}

/// `plan` with only the `projection` columns, if given.
fn project(
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
