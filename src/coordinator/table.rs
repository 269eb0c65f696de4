//! `DistributedTable`: a planned distributed query as a DataFusion table provider.
//!
//! datafusion-python scans it through FFI: `ctx.read_table(plan)` gives an ordinary, lazy
//! `datafusion.DataFrame`, and each scan (each `collect`, `show`, `execute_stream`...) plans
//! the query afresh for the current workers and runs it.
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::datasource::TableType;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

use super::planner::{ClusterPlanner, PlanRequest, Planned};
use super::root::DistributedRootExec;
use super::task_log::TaskLog;
use crate::runtime;

/// A run of the query: the plan executed and where its tasks went.
pub type Run = (Arc<dyn ExecutionPlan>, Arc<TaskLog>);

pub struct DistributedTable {
    planner: Arc<ClusterPlanner>,
    request: Arc<PlanRequest>,
    /// The plan made when the query was submitted: shown by `explain`.
    planned: Arc<dyn ExecutionPlan>,
    /// The plan run by the latest scan and where its tasks ran: for metrics and ANALYZE.
    last_run: Mutex<Option<Run>>,
}

impl std::fmt::Debug for DistributedTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedTable").finish_non_exhaustive()
    }
}

impl DistributedTable {
    pub fn new(planner: Arc<ClusterPlanner>, request: Arc<PlanRequest>, planned: Planned) -> Self {
        Self {
            planner,
            request,
            planned: planned.plan,
            last_run: Mutex::new(None),
        }
    }

    /// The plan made when the query was submitted (what `explain` shows).
    pub fn planned(&self) -> &Arc<dyn ExecutionPlan> {
        &self.planned
    }

    /// The plan run by the latest scan and its task log, if it ran.
    pub fn last_run(&self) -> Option<Run> {
        self.last_run.lock().expect("poisoned").clone()
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
        // datafusion-python polls this future on its own runtime: plan on ours.
        let planner = Arc::clone(&self.planner);
        let request = Arc::clone(&self.request);
        let Planned {
            plan,
            task_ctx,
            log,
        } = runtime::handle()
            .spawn(async move { planner.plan(&request).await })
            .await
            .map_err(|e| exec_datafusion_err!("planning task failed: {e}"))??;
        *self.last_run.lock().expect("poisoned") = Some((Arc::clone(&plan), log));
        let mut plan = plan;
        if let Some(projection) = projection {
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
            plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
        }
        Ok(Arc::new(DistributedRootExec::new(plan, task_ctx)))
    }
}
