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
    /// `codec` is the worker-side session's physical extension codec (or the session): it
    /// decodes what the coordinator's session encoded, Python UDFs included.
    /// `stores` are `(url, kind, options)` of the object stores the worker's setup registered;
    /// `security` is `Security._to_core()` or None; with `refuse_pickled_code` only functions
    /// the worker's setup registered run; `memory_limit` (bytes) and `spill_dir` bound memory.
    #[new]
    #[pyo3(signature = (
        host, port, codec, version, stores = Vec::new(), security = None,
        refuse_pickled_code = false, memory_limit = None, spill_dir = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        host: String,
        port: u16,
        codec: &Bound<'_, PyAny>,
        version: String,
        stores: Vec<(String, String, BTreeMap<String, String>)>,
        security: Option<SecuritySpec>,
        refuse_pickled_code: bool,
        memory_limit: Option<usize>,
        spill_dir: Option<PathBuf>,
    ) -> PyResult<Self> {
        let session = codec;
        // The functions the worker's setup registered: those that travel by name (an
        // extension package's) are looked up there, and the handshake lists them.
        let functions = capsule::session_functions(session)?;
        let own_functions = functions.own_names().map_err(to_py_err)?;
        let mut codec = import_session_codec(session)?.with_functions(functions);
        if refuse_pickled_code {
            codec = codec.refusing_pickled_code();
        }
        let security = Security::try_from(security)?;
        let options = WorkerOptions {
            version: worker_info::advertise(&version, &own_functions),
            own_stores: stores.into_iter().map(StoreSpec::from).collect(),
            security: security.clone(),
            memory_limit,
            spill_dir,
        };
        let worker = build_worker(Arc::new(codec), options).map_err(to_py_err)?;
        Ok(Self {
            host,
            port,
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
