//! Python exceptions raised by the Rust core.
use std::fmt;

use datafusion::error::DataFusionError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(
    _internal,
    DistributedError,
    PyException,
    "A distributed query could not be planned or executed."
);
create_exception!(
    _internal,
    WorkerError,
    DistributedError,
    "A worker could not be reached, failed, or is incompatible."
);

/// A failure that names a worker: surfaces in Python as `WorkerError`.
#[derive(Debug)]
pub struct WorkerFailure(pub String);

impl fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WorkerFailure {}

pub fn worker_failure(msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(WorkerFailure(msg)))
}

/// Whether `err` is, at its root, a failure that names a worker.
pub fn is_worker_failure(err: &DataFusionError) -> bool {
    matches!(err.find_root(), DataFusionError::External(e) if e.is::<WorkerFailure>())
}

/// Maps a DataFusion error to a Python exception, keeping DataFusion's message.
pub fn to_py_err(err: DataFusionError) -> PyErr {
    match err.find_root() {
        // The failure's own words, without DataFusion's "External error: " prefix.
        DataFusionError::External(e) if e.is::<WorkerFailure>() => {
            WorkerError::new_err(e.to_string())
        }
        _ => DistributedError::new_err(err.to_string()),
    }
}
