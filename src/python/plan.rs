//! `DistributedPlan`: a planned distributed query, exported to datafusion-python as a table
//! (`ctx.read_table(plan)`), with its explain output and per-task metrics.
use std::sync::Arc;

use datafusion::arrow::array::RecordBatchIterator;
use datafusion::arrow::ffi::FFI_ArrowSchema;
use datafusion::arrow::ffi_stream::FFI_ArrowArrayStream;
use datafusion::catalog::TableProvider;
use datafusion::physical_plan::displayable;
use datafusion_distributed::{
    display_plan_ascii, display_plan_graphviz, rewrite_distributed_plan_with_metrics,
    DistributedExec, DistributedMetricsFormat,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple};

use super::capsule;
use super::errors::{query_error, to_py_err};
use crate::coordinator::{operator_metrics, stage_graph, DistributedTable, Run, TaskRecord};
use crate::protocol::display_url;
use crate::runtime;

/// How long `task_metrics` waits for workers' metrics.
const METRICS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

#[pyclass(frozen, weakref, module = "datafusion_distributed_py._internal")]
pub struct DistributedPlan {
    table: Arc<DistributedTable>,
}

impl DistributedPlan {
    pub fn new(table: Arc<DistributedTable>) -> Self {
        Self { table }
    }
}

#[pymethods]
impl DistributedPlan {
    /// True when the planner split the query into stages joined by network boundaries.
    #[getter]
    fn is_distributed(&self) -> bool {
        self.table.planned().is::<DistributedExec>()
    }

    /// The query's row count when the statistics of its plan know it exactly (as
    /// single-node's `count()` answers from them), else None.
    #[getter]
    fn exact_rows(&self) -> Option<usize> {
        self.table.exact_rows()
    }

    /// The plan's stages, head first, for pictures: `(stage, tasks, [(depth, line,
    /// output_rows, elapsed_compute_ns, bytes)], [(input stage, boundary line)])`; with
    /// `analyze`, the latest run's, with its metrics summed over tasks.
    #[pyo3(signature = (analyze = false))]
    fn stages<'py>(&self, py: Python<'py>, analyze: bool) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let plan = match (analyze, self.table.last_run()) {
            (false, _) => Arc::clone(self.table.planned()),
            (true, Some((plan, _))) if plan.is::<DistributedExec>() => {
                runtime::wait_for(py, async move {
                    rewrite_distributed_plan_with_metrics(
                        plan,
                        DistributedMetricsFormat::Aggregated,
                    )
                    .await
                    .map_err(to_py_err)
                })?
            }
            (true, Some((plan, _))) => plan,
            (true, None) => {
                return Err(PyValueError::new_err(
                    "analyze=True needs a run of the query first (collect it)",
                ))
            }
        };
        stage_graph(&plan)
            .into_iter()
            .map(|s| {
                let ops: Vec<_> = s
                    .operators
                    .into_iter()
                    .map(|o| (o.depth, o.line, o.output_rows, o.elapsed_compute, o.bytes))
                    .collect();
                (s.num, s.tasks, ops, s.inputs).into_pyobject(py)
            })
            .collect()
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
        let (plan, log) = match (analyze, self.table.last_run()) {
            (false, _) => (Arc::clone(self.table.planned()), None),
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
        let decisions = match &log {
            Some(log) => log.decisions(),
            None => self.table.decisions().to_vec(),
        };
        let mut text = match format {
            "graphviz" => display_plan_graphviz(plan).map_err(to_py_err)?,
            _ => display_plan_ascii(plan.as_ref(), analyze),
        };
        if !decisions.is_empty() && format == "text" {
            text.push_str("Joins planned from real sizes:\n");
            for decision in decisions {
                text.push_str(&format!("  {decision}\n"));
            }
        }
        let sizing = match &log {
            Some(log) => log.sizing(),
            None => self.table.sizing().map(str::to_string),
        };
        if let (Some(why), "text") = (sizing, format) {
            text.push_str(&format!("Stages sized for a shared cluster: {why}\n"));
        }
        if let (Some(log), "text") = (log, format) {
            text.push_str("Tasks by worker:\n");
            text.push_str(&log.render());
        }
        Ok(text)
    }

    /// Per-task records of the latest run (stage, task, worker, rows, bytes, compute time,
    /// spills), after waiting for every worker's metrics; with the tasks of the runs a lost
    /// worker cut short first (their `attempt` is lower).
    #[pyo3(signature = (wait_s=5.0))]
    fn task_metrics<'py>(&self, py: Python<'py>, wait_s: f64) -> PyResult<Vec<Bound<'py, PyDict>>> {
        task_records(py, self.table.runs(), wait_s)
    }

    /// The latest run's metrics per operator, in pre-order with stages expanded (see
    /// `operator_metrics`): `(name, line, stage, [(metric, value, timestamp_ns, partition,
    /// labels)])`;
    /// empty before a run.
    fn operator_metrics<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let Some((plan, _)) = self.table.last_run() else {
            return Ok(Vec::new());
        };
        let operators = runtime::wait_for(py, async move {
            if let Some(exec) = plan.downcast_ref::<DistributedExec>() {
                let _ = tokio::time::timeout(METRICS_WAIT, exec.wait_for_metrics()).await;
            }
            let plan = match plan.is::<DistributedExec>() {
                true => rewrite_distributed_plan_with_metrics(
                    plan,
                    DistributedMetricsFormat::Aggregated,
                )
                .await
                .map_err(to_py_err)?,
                false => plan,
            };
            Ok(operator_metrics(&plan))
        })?;
        operators
            .into_iter()
            .map(|op| {
                let rows = op
                    .metrics
                    .into_iter()
                    .map(|m| {
                        let labels = PyDict::new(py);
                        for (k, v) in m.labels {
                            labels.set_item(k, v)?;
                        }
                        (m.name, m.value, m.timestamp_ns, m.partition, labels).into_pyobject(py)
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                (op.name, op.line, op.stage, rows).into_pyobject(py)
            })
            .collect()
    }

    /// Runs the query (a new run, as a scan through datafusion-python would start) and
    /// returns its batches as Arrow C streams (`arrow_array_stream` capsules): one per output
    /// partition when `partitioned`, else one. This is how a result is read when nothing was
    /// added to the query in Python: it skips datafusion-python planning a `SELECT *` over
    /// the result and converting its session for every FFI call, which cost more than the
    /// rest of a short query's overhead.
    #[pyo3(signature = (partitioned = false))]
    fn collect_streams<'py>(
        &self,
        py: Python<'py>,
        partitioned: bool,
    ) -> PyResult<Vec<Bound<'py, PyCapsule>>> {
        let table = Arc::clone(&self.table);
        let (schema, parts) = runtime::wait_for(py, async move {
            table.collect_whole(partitioned).await.map_err(query_error)
        })?;
        parts
            .into_iter()
            .map(|batches| {
                let reader =
                    RecordBatchIterator::new(batches.into_iter().map(Ok), Arc::clone(&schema));
                let stream = FFI_ArrowArrayStream::new(Box::new(reader));
                capsule::export(py, stream, "arrow_array_stream")
            })
            .collect()
    }

    /// The rows a frame's `repr` shows, as datafusion-python's formatter reads them (see
    /// `DistributedTable::collect_to_display`): one Arrow C stream of them, and whether the
    /// result has more.
    fn display_stream<'py>(
        &self,
        py: Python<'py>,
        max_bytes: usize,
        min_rows: usize,
        max_rows: usize,
    ) -> PyResult<(Bound<'py, PyCapsule>, bool)> {
        let table = Arc::clone(&self.table);
        let (schema, batches, more) = runtime::wait_for(py, async move {
            table
                .collect_to_display(max_bytes, min_rows, max_rows)
                .await
                .map_err(query_error)
        })?;
        let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
        let stream = FFI_ArrowArrayStream::new(Box::new(reader));
        Ok((capsule::export(py, stream, "arrow_array_stream")?, more))
    }

    /// The result's schema as an Arrow C schema (`pa.schema(plan)`): the table's, as
    /// `ctx.read_table(plan).schema()` gives it, without exporting the table to datafusion.
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_schema__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // a schema is given as it is
        let schema = FFI_ArrowSchema::try_from(self.table.schema().as_ref())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        capsule::export(py, schema, "arrow_schema")
    }

    /// How long each step of this query's fixed cost took, in seconds, in order: planning
    /// for the workers at submission (`workers`, `session`, `decode`, `kept tables`,
    /// `checks`, `subqueries`, `rewrites`, `stages`), then, once its result was read whole,
    /// `start run` and `run`.
    fn steps(&self) -> Vec<(&'static str, f64)> {
        self.table
            .steps()
            .into_iter()
            .map(|(name, took)| (name, took.as_secs_f64()))
            .collect()
    }

    /// Bytes of plan fragments the latest scan sent to workers (every run of it).
    fn plan_bytes_sent(&self) -> usize {
        self.table
            .runs()
            .iter()
            .map(|(_, log)| log.plan_bytes())
            .sum()
    }

    /// The worker failure the latest run ended with, as `(worker_url, kind, message)`: what
    /// reached Python through datafusion-python as text only.
    fn last_failure(&self) -> Option<(Option<String>, &'static str, String)> {
        self.table.last_failure()
    }

    /// After a run of the query failed (raised from a method reading its whole result): whether
    /// it may run again from the start on the workers left — a worker was lost, runs are
    /// left; the retry is then announced and the next run is numbered after the failed one.
    fn may_run_again(&self) -> bool {
        self.table.may_run_again()
    }

    /// Lets a lost worker cost a retry of the query (the default), or not (while writing).
    fn set_retries(&self, on: bool) {
        self.table.set_retries(on);
    }

    /// Sends the tasks of the next runs under this W3C `traceparent` (OpenTelemetry's
    /// context of the query's span); None: untraced. A value that is not one is ignored.
    #[pyo3(signature = (traceparent))]
    fn set_trace_parent(&self, traceparent: Option<&str>) {
        self.table.set_trace_parent(traceparent);
    }

    /// The FFI table-provider protocol of datafusion-python (`ctx.read_table(plan)`).
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        capsule::export_table(py, session, Arc::clone(&self.table) as _, false)
    }
}

/// Per-task records of `runs` (one query's, in order), after waiting for every worker's
/// metrics of the latest; with the tasks of the runs a lost worker cut short first (their
/// `attempt` is lower).
/// The records of `runs`' tasks, once their metrics arrived (waiting at most `wait_s`).
pub fn task_records<'py>(
    py: Python<'py>,
    runs: Vec<Run>,
    wait_s: f64,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let wait = std::time::Duration::from_secs_f64(wait_s.clamp(0.0, 3600.0));
    let Some((plan, _)) = runs.last().cloned() else {
        return Err(PyValueError::new_err(
            "no run yet: collect the DataFrame first",
        ));
    };
    runtime::wait_for(py, async move {
        if let Some(exec) = plan.downcast_ref::<DistributedExec>() {
            // A failed run may never report them all: then the records say what arrived.
            let _ = tokio::time::timeout(wait, exec.wait_for_metrics()).await;
        }
        Ok(())
    })?;
    let mut records = Vec::new();
    for (_, log) in &runs {
        for r in log.records() {
            records.push(metrics_record(py, &r, log.attempt)?);
        }
    }
    Ok(records)
}

/// One task as the `MetricsRecord` dict of the Python API.
fn metrics_record<'py>(
    py: Python<'py>,
    r: &TaskRecord,
    attempt: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("query_id", r.query_id.to_string())?;
    d.set_item("stage", r.stage)?;
    d.set_item("task", r.task)?;
    d.set_item("tasks_in_stage", r.task_count)?;
    d.set_item("worker_url", display_url(&r.url))?;
    d.set_item("ran_on", "workers")?;
    d.set_item("attempt", attempt)?;
    d.set_item("spill_count", r.spill_count)?;
    d.set_item("spilled_bytes", r.spilled_bytes)?;
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
    let span = r.worker_span.as_ref();
    d.set_item("worker_pid", span.map(|s| s.pid))?;
    d.set_item("worker_host", span.map(|s| s.host.clone()))?;
    d.set_item("worker_start_ns", span.map(|s| s.start_ns))?;
    d.set_item("worker_end_ns", span.map(|s| s.end_ns))?;
    d.set_item("traceparent", span.map(|s| s.traceparent.clone()))?;
    Ok(d)
}
