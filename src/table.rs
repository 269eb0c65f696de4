//! `DistributedPlan`: a planned distributed query exported to datafusion-python as a table.
//!
//! `ctx.read_table(plan)` gives an ordinary, lazy `datafusion.DataFrame`; each scan of it
//! (each `collect`, `show`, `execute_stream`...) runs the distributed plan afresh.
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::TableType;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion_distributed::{display_plan_ascii, display_plan_graphviz, DistributedExec};
use datafusion_ffi::execution::FFI_TaskContextProvider;
use datafusion_ffi::table_provider::FFI_TableProvider;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::capsule;
use crate::errors::to_py_err;
use crate::root::DistributedRootExec;
use crate::runtime;

#[derive(Debug)]
pub struct DistributedTable {
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
    /// The copy of the plan run by the latest scan, kept for metrics and EXPLAIN ANALYZE.
    last_run: Mutex<Option<Arc<dyn ExecutionPlan>>>,
}

impl DistributedTable {
    pub fn new(plan: Arc<dyn ExecutionPlan>, task_ctx: Arc<TaskContext>) -> Self {
        Self {
            plan,
            task_ctx,
            last_run: Mutex::new(None),
        }
    }

    /// A copy with fresh execution state: a plan node may only be executed once.
    fn fresh_plan(&self) -> Result<Arc<dyn ExecutionPlan>> {
        let children = self.plan.children().into_iter().cloned().collect();
        Arc::clone(&self.plan).with_new_children(children)
    }
}

#[async_trait]
impl TableProvider for DistributedTable {
    fn schema(&self) -> SchemaRef {
        self.plan.schema()
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
        let mut plan = self.fresh_plan()?;
        *self.last_run.lock().expect("poisoned") = Some(Arc::clone(&plan));
        if let Some(projection) = projection {
            let schema = plan.schema();
            let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = projection
                .iter()
                .map(|&i| {
                    let name = schema.field(i).name().clone();
                    (Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>, name)
                })
                .collect();
            plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
        }
        Ok(Arc::new(DistributedRootExec::new(
            plan,
            Arc::clone(&self.task_ctx),
        )))
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
        self.table.plan.is::<DistributedExec>()
    }

    /// Renders the plan: `format` is "text" or "graphviz"; `analyze` uses the latest run.
    #[pyo3(signature = (format = "text", analyze = false))]
    fn display(&self, format: &str, analyze: bool) -> PyResult<String> {
        let plan = if analyze {
            self.table
                .last_run
                .lock()
                .expect("poisoned")
                .clone()
                .unwrap_or_else(|| Arc::clone(&self.table.plan))
        } else {
            Arc::clone(&self.table.plan)
        };
        if !plan.is::<DistributedExec>() {
            return Ok(displayable(plan.as_ref()).indent(true).to_string());
        }
        match format {
            "text" => Ok(display_plan_ascii(plan.as_ref(), analyze)),
            "graphviz" => display_plan_graphviz(plan).map_err(to_py_err),
            other => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown explain format {other:?}: use 'text' or 'graphviz'"
            ))),
        }
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
