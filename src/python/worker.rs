//! `WorkerServer`: the Python handle on a worker's gRPC server (see `worker::server`).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion_distributed::Worker;
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use super::capsule::{self, import_session_codec};
use super::errors::to_py_err;
use super::security::SecuritySpec;
use crate::object_stores::StoreSpec;
use crate::protocol::worker_info;
use crate::runtime;
use crate::security::Security;
use crate::worker::{build_worker, Serving, WorkerOptions};

/// What a worker server is built from, as Python hands it over (the `core_specs.WorkerSpec`
/// dataclass, read attribute by attribute).
#[derive(FromPyObject)]
pub struct WorkerSpec {
    #[pyo3(attribute)]
    host: String,
    #[pyo3(attribute)]
    port: u16,
    /// The worker-side session's physical extension codec (or the session): it decodes what
    /// the coordinator's session encoded, Python UDFs included.
    #[pyo3(attribute)]
    codec: Py<PyAny>,
    #[pyo3(attribute)]
    version: String,
    /// `(url, kind, options)` of the object stores the worker's setup registered.
    #[pyo3(attribute)]
    stores: Vec<(String, String, BTreeMap<String, String>)>,
    /// `Security._to_core()`, or None.
    #[pyo3(attribute)]
    security: Option<SecuritySpec>,
    /// Only functions the worker's setup registered run.
    #[pyo3(attribute)]
    refuse_pickled_code: bool,
    /// Bytes of memory, and where tasks spill beyond them.
    #[pyo3(attribute)]
    memory_limit: Option<usize>,
    #[pyo3(attribute)]
    spill_dir: Option<PathBuf>,
}

#[pyclass(module = "datafusion_distributed_py._internal")]
pub struct WorkerServer {
    host: String,
    port: u16,
    worker: Worker,
    security: Security,
    serving: Mutex<Option<Serving>>,
}

#[pymethods]
impl WorkerServer {
    /// `spec`: a `core_specs.WorkerSpec`.
    #[new]
    fn new(py: Python<'_>, spec: WorkerSpec) -> PyResult<Self> {
        let session = spec.codec.bind(py);
        // The functions the worker's setup registered: those that travel by name (an
        // extension package's) are looked up there, and the handshake lists them.
        let functions = capsule::session_functions(session)?;
        let own_functions = functions.own_names().map_err(to_py_err)?;
        let mut codec = import_session_codec(session)?.with_functions(functions);
        if spec.refuse_pickled_code {
            codec = codec.refusing_pickled_code();
        }
        let security = Security::try_from(spec.security)?;
        let options = WorkerOptions {
            version: worker_info::advertise(&spec.version, &own_functions),
            own_stores: spec.stores.into_iter().map(StoreSpec::from).collect(),
            security: security.clone(),
            memory_limit: spec.memory_limit,
            spill_dir: spec.spill_dir,
        };
        let worker = build_worker(Arc::new(codec), options).map_err(to_py_err)?;
        Ok(Self {
            host: spec.host,
            port: spec.port,
            worker,
            security,
            serving: Mutex::new(None),
        })
    }

    /// Binds the port and serves in the background; returns the bound port.
    fn start(&mut self, py: Python<'_>) -> PyResult<u16> {
        let mut serving = self.serving.lock().expect("poisoned");
        if serving.is_some() {
            return Ok(self.port);
        }
        let addr = format!("{}:{}", self.host, self.port);
        let started = py.detach(|| {
            let _in_runtime = runtime::runtime().enter();
            runtime::runtime().block_on(Serving::start(self.worker.clone(), &addr, &self.security))
        });
        let started =
            started.map_err(|e| PyOSError::new_err(format!("cannot serve on {addr}: {e}")))?;
        self.port = started.port();
        *serving = Some(started);
        Ok(self.port)
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    #[getter]
    fn host(&self) -> String {
        self.host.clone()
    }

    #[getter]
    fn running(&self) -> bool {
        self.serving
            .lock()
            .expect("poisoned")
            .as_ref()
            .is_some_and(Serving::is_running)
    }

    /// Stops accepting work; in-flight calls get up to `drain_seconds` to finish
    /// (`float("inf")`: as long as they take).
    #[pyo3(signature = (drain_seconds = 5.0))]
    fn stop(&self, py: Python<'_>, drain_seconds: f64) -> PyResult<()> {
        if drain_seconds.is_nan() {
            return Err(PyValueError::new_err(
                "drain_seconds must be a number, got nan",
            ));
        }
        // Too long to represent (inf included) means no limit.
        let drain = Duration::try_from_secs_f64(drain_seconds.max(0.0)).ok();
        let Some(serving) = self.serving.lock().expect("poisoned").take() else {
            return Ok(());
        };
        // Waits with Ctrl-C noticed: an unlimited drain can be interrupted.
        runtime::wait_for(py, async move {
            serving
                .stop(drain)
                .await
                .map_err(|e| PyRuntimeError::new_err(format!("worker server failed: {e}")))
        })
    }
}
