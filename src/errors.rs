//! Python exceptions raised by the Rust core.
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

/// Maps a DataFusion error to a Python exception, keeping DataFusion's message.
pub fn to_py_err(err: DataFusionError) -> PyErr {
    let msg = err.to_string();
    if looks_like_worker_failure(&msg) {
        WorkerError::new_err(msg)
    } else {
        DistributedError::new_err(msg)
    }
}

fn looks_like_worker_failure(msg: &str) -> bool {
    const MARKERS: [&str; 6] = [
        "transport error",
        "Connection refused",
        "connection error",
        "tcp connect error",
        "Unavailable",
        "h2 protocol error",
    ];
    MARKERS.iter().any(|m| msg.contains(m))
}
