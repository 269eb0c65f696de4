//! The Python exceptions raised by the Rust core, and the mapping from DataFusion errors.
use datafusion::error::DataFusionError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use crate::errors::{as_not_distributable, as_worker_failure};

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

create_exception!(
    _internal,
    UnsupportedPlanError,
    DistributedError,
    "The query's plan cannot be distributed without changing its answer."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("DistributedError", m.py().get_type::<DistributedError>())?;
    m.add("WorkerError", m.py().get_type::<WorkerError>())?;
    m.add(
        "UnsupportedPlanError",
        m.py().get_type::<UnsupportedPlanError>(),
    )?;
    Ok(())
}

/// Maps a DataFusion error to a Python exception, keeping DataFusion's message.
pub fn to_py_err(err: DataFusionError) -> PyErr {
    // The failure's own words, without DataFusion's "External error: " prefix.
    if let Some(failure) = as_worker_failure(&err) {
        let py_err = WorkerError::new_err(failure.to_string());
        crate::runtime::interpreter::attach(|py| {
            let url = failure.worker.clone();
            // Never fails on an exception instance; a failure here would only lose the attribute.
            let _ = py_err.value(py).setattr("worker_url", url);
            let _ = py_err.value(py).setattr("kind", failure.kind.name());
            let _ = py_err.value(py).setattr("rows_delivered", py.None());
        });
        return py_err;
    }
    if let Some(why) = as_not_distributable(&err) {
        return UnsupportedPlanError::new_err(why.to_string());
    }
    DistributedError::new_err(err.to_string())
}

/// An error of running a query, raised as datafusion-python raises it (an `Exception` whose
/// text starts with "DataFusion error: "), so the same `except` clauses catch it whether the
/// result was read through datafusion-python or directly; a lost worker is a `WorkerError`.
pub fn query_error(err: DataFusionError) -> PyErr {
    if as_worker_failure(&err).is_some() {
        return to_py_err(err);
    }
    let text = err.to_string();
    // What the FFI path loses on the way too: the wrapper datafusion-distributed puts around a
    // worker's error.
    let text = text.strip_prefix("External error: ").unwrap_or(&text);
    PyException::new_err(format!("DataFusion error: {text}"))
}
