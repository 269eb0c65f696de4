//! `DistributedTable`: a planned distributed query as a DataFusion table provider.
//!
//! datafusion-python scans it through FFI: `ctx.read_table(plan)` gives an ordinary, lazy
//! `datafusion.DataFrame`, and each scan (each `collect`, `show`, `execute_stream`...) plans
//! the query afresh for the current workers and runs it — again, on the workers left, when a
//! worker is lost before the first batch reached the caller (see `root`).
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::planner::{ClusterPlanner, PlanRequest, Planned};
use super::query::{project, FailureRecord, Query, Run};
use super::root::DistributedRootExec;

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
            query: Arc::new(Query::new(planner, request)),
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
