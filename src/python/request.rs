//! `PlanRequest` as it crosses from Python: one object (the `plan_request.PlanRequest`
//! dataclass) read attribute by attribute, for every entry point of the coordinator
//! (`distribute`, `keep`, `insert`), made the core's `coordinator::PlanRequest`.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::capsule::{import_session_codec, session_functions, session_settings};
use super::errors::to_py_err;
use super::progress_queue::ProgressQueue;
use crate::coordinator::{EarlyHandshake, PlanRequest, ProgressSink, ProgressUpdate, Role};
use crate::object_stores::StoreSpec;
use crate::plan_rewrites::CompressedTable;

/// What the core plans a query from, as Python hands it over (see `plan_request.py`).
#[derive(FromPyObject)]
pub struct Request {
    /// The physical plan as datafusion-python serialised it.
    #[pyo3(attribute)]
    plan_bytes: Py<PyBytes>,
    /// The session's physical extension codec (its capsule, or the session).
    #[pyo3(attribute)]
    codec: Py<PyAny>,
    /// The session: its settings and functions are read, and it is kept alive with the plan.
    #[pyo3(attribute)]
    session: Option<Py<PyAny>>,
    /// Entries set over the session's settings: `distributed.*` and planning overrides.
    #[pyo3(attribute)]
    options: HashMap<String, String>,
    /// `(url, kind, options)` of the session's object stores.
    #[pyo3(attribute)]
    stores: Vec<(String, String, BTreeMap<String, String>)>,
    /// Called with each progress event (see `progress.to_rust`), or a `ProgressQueue` that
    /// holds them for Python to read.
    #[pyo3(attribute)]
    progress: Option<Py<PyAny>>,
    #[pyo3(attribute)]
    min_workers: usize,
    #[pyo3(attribute)]
    max_retries: usize,
    #[pyo3(attribute)]
    stall_timeout: Option<f64>,
    #[pyo3(attribute)]
    spool_dir: Option<String>,
    /// The plan's logical table scans (`LogicalPlan.to_bytes()`): a CSV or NDJSON table's
    /// compression, which the physical plan's bytes leave out.
    #[pyo3(attribute)]
    table_scans: Vec<Vec<u8>>,
    /// Its window expressions with a `FILTER` (`Expr.to_bytes()`).
    #[pyo3(attribute)]
    window_filters: Vec<Vec<u8>>,
    /// The query writes (never run twice).
    #[pyo3(attribute)]
    writes: bool,
    /// Seconds between asks for running tasks' rows (0: never).
    #[pyo3(attribute)]
    live_interval: f64,
    /// The workers' handshake, started when the query was asked for (`handshake_ahead`).
    #[pyo3(attribute)]
    handshake: Option<Py<Handshake>>,
}

/// A query's handshake with the workers, started before datafusion-python plans the query
/// (`Coordinator.handshake_ahead`), taken by the query's planning.
#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct Handshake(pub Arc<EarlyHandshake>);

fn seconds(name: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| PyValueError::new_err(format!("{name} must be a number of seconds >= 0")))
}

impl Request {
    /// The core's request.
    pub fn into_plan_request(self, py: Python<'_>) -> PyResult<PlanRequest> {
        let live_interval = seconds("live_interval", self.live_interval)?;
        let stall_timeout = self
            .stall_timeout
            .map(|s| seconds("stall_timeout", s))
            .transpose()?;
        // The session's own settings, then ours (`distributed.*`, planning overrides) over them.
        let mut settings = match &self.session {
            Some(session) => session_settings(session.bind(py))?,
            None => HashMap::new(),
        };
        settings.extend(self.options);
        let mut compressed_tables = Vec::new();
        for scan in &self.table_scans {
            compressed_tables.extend(CompressedTable::from_logical_scan(scan).map_err(to_py_err)?);
        }
        let codec = import_session_codec(self.codec.bind(py))?;
        let codec = match &self.session {
            Some(session) => codec.with_functions(session_functions(session.bind(py))?),
            None => codec,
        };
        Ok(PlanRequest {
            plan_bytes: self.plan_bytes.bind(py).as_bytes().to_vec(),
            plan: None,
            compressed_tables,
            window_filters: self.window_filters,
            codec: Arc::new(codec),
            options: settings,
            stores: self.stores.into_iter().map(StoreSpec::from).collect(),
            progress: self.progress.map(|p| progress_sink(py, p)),
            keep_alive: self
                .session
                .map(|s| Arc::new(s) as Arc<dyn std::any::Any + Send + Sync>),
            min_workers: self.min_workers,
            max_retries: self.max_retries,
            writes: self.writes,
            live_interval,
            stall_timeout,
            role: Role::Query,
            keep_as: None,
            spool_dir: self.spool_dir.map(std::path::PathBuf::from),
            early_handshake: self.handshake.map(|h| Arc::clone(&h.get().0)),
        })
    }
}

/// Where a run's progress events go: a `ProgressQueue` holds them (no Python called while the
/// run runs), anything else is called with each.
fn progress_sink(py: Python<'_>, progress: Py<PyAny>) -> Arc<dyn ProgressSink> {
    match progress.bind(py).downcast::<ProgressQueue>() {
        Ok(queue) => Arc::clone(&queue.get().0) as Arc<dyn ProgressSink>,
        Err(_) => Arc::new(PythonProgress(progress)),
    }
}

/// The user's progress callback, called `(stage, done, total, worker_url, attempt, kind, rows,
/// eta_s)` (`progress.to_rust` turns those into `ProgressEvent`s).
struct PythonProgress(Py<PyAny>);

impl ProgressSink for PythonProgress {
    fn update(&self, u: ProgressUpdate<'_>) {
        crate::runtime::interpreter::attach(|py| {
            let args = (
                u.stage, u.done, u.total, u.worker, u.attempt, u.kind, u.rows, u.eta_s,
            );
            if let Err(e) = self.0.call1(py, args) {
                log::warn!("progress callback failed: {e}");
            }
        });
    }
}
