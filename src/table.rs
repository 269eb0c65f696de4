//! `DistributedPlan`: a planned distributed query exported to datafusion-python as a table.
//!
//! `ctx.read_table(plan)` gives an ordinary, lazy `datafusion.DataFrame`; each scan of it
//! (each `collect`, `show`, `execute_stream`...) plans the query afresh for the current
//! workers and runs it.
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
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion_distributed::{
    display_plan_ascii, display_plan_graphviz, rewrite_distributed_plan_with_metrics,
    DistributedExec, DistributedMetricsFormat,
};
use datafusion_ffi::execution::FFI_TaskContextProvider;
use datafusion_ffi::table_provider::FFI_TableProvider;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use crate::capsule;
use crate::coordinator::{ClusterPlanner, PlanRequest, Planned};
use crate::errors::to_py_err;
use crate::resolver::display_url;
use crate::root::DistributedRootExec;
use crate::runtime;
use crate::tracking::TaskLog;

/// A run of the query: the plan executed and where its tasks went.
type Run = (Arc<dyn ExecutionPlan>, Arc<TaskLog>);

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

/// A distributed physical plan, ready to run. Exported to datafusion-python as a table.
#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct DistributedPlan {
    pub table: Arc<DistributedTable>,
}

#[pymethods]
impl DistributedPlan {
    /// True when the planner split the query into stages joined by network boundaries.
    #[getter]
    fn is_distributed(&self) -> bool {
        self.table.planned.is::<DistributedExec>()
    }

    /// Renders the plan: `format` is "text" or "graphviz". With `analyze`, the latest run:
    /// its metrics per stage and the worker each task ran on.
    #[pyo3(signature = (format = "text", analyze = false))]
    fn display(&self, py: Python<'_>, format: &str, analyze: bool) -> PyResult<String> {
        if format != "text" && format != "graphviz" {
            return Err(PyValueError::new_err(format!(
                "unknown explain format {format:?}: use 'text' or 'graphviz'"
            )));
        }
        let latest = self.table.last_run.lock().expect("poisoned").clone();
        let (plan, log) = match (analyze, latest) {
            (false, _) => (Arc::clone(&self.table.planned), None),
            (true, Some((plan, log))) => (plan, Some(log)),
            (true, None) => {
                return Err(PyValueError::new_err(
                    "analyze=True needs a run of the query first (collect it)",
                ))
            }
        };
        if !plan.is::<DistributedExec>() {
            return Ok(displayable(plan.as_ref()).indent(true).to_string());
        }
        let plan = match analyze {
            true => runtime::wait_for(py, async move {
                rewrite_distributed_plan_with_metrics(plan, DistributedMetricsFormat::Aggregated)
                    .await
                    .map_err(to_py_err)
            })?,
            false => plan,
        };
        let mut text = match format {
            "graphviz" => display_plan_graphviz(plan).map_err(to_py_err)?,
            _ => display_plan_ascii(plan.as_ref(), analyze),
        };
        if let (Some(log), "text") = (log, format) {
            text.push_str("Tasks by worker:\n");
            text.push_str(&log.render());
        }
        Ok(text)
    }

    /// Per-task records of the latest run (stage, task, worker, rows, bytes, compute time),
    /// after waiting for every worker's metrics.
    fn task_metrics<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let latest = self.table.last_run.lock().expect("poisoned").clone();
        let Some((plan, log)) = latest else {
            return Err(PyValueError::new_err(
                "no run yet: collect the DataFrame first",
            ));
        };
        runtime::wait_for(py, async move {
            if let Some(exec) = plan.downcast_ref::<DistributedExec>() {
                exec.wait_for_metrics().await;
            }
            Ok(())
        })?;
        log.records()
            .into_iter()
            .map(|r| {
                let d = PyDict::new(py);
                d.set_item("stage", r.stage)?;
                d.set_item("task", r.task)?;
                d.set_item("tasks_in_stage", r.task_count)?;
                d.set_item("worker_url", display_url(&r.url))?;
                d.set_item("output_rows", r.output_rows)?;
                d.set_item("output_bytes", r.output_bytes)?;
                d.set_item(
                    "elapsed_compute_ms",
                    r.elapsed_compute_ns.map(|n| n as f64 / 1e6),
                )?;
                d.set_item(
                    "duration_ms",
                    r.finished_at.map(|f| (f - r.sent_at).as_secs_f64() * 1e3),
                )?;
                Ok(d)
            })
            .collect()
    }

    /// The FFI table-provider protocol of datafusion-python (`ctx.read_table(plan)`).
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let task_ctx_provider: FFI_TaskContextProvider = capsule::import(
            session,
            "__datafusion_task_context_provider__",
            "datafusion_task_context_provider",
        )?;
        let provider = FFI_TableProvider::new(
            Arc::clone(&self.table) as Arc<dyn TableProvider>,
            false,
            Some(runtime::handle()),
            task_ctx_provider,
            None,
        );
        capsule::export(py, provider, "datafusion_table_provider")
    }
}
