//! `check_health(url, security, timeout)`: the standard gRPC health check of one worker.
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::errors::to_py_err;
use super::security::SecuritySpec;
use crate::protocol::{check_health as check, parse_worker_url, WorkerChannels};
use crate::runtime;
use crate::security::Security;

/// The serving status of the worker at `url` (`"SERVING"` when it accepts work).
#[pyfunction]
#[pyo3(signature = (url, security = None, timeout = 5.0))]
pub fn check_health(
    py: Python<'_>,
    url: &str,
    security: Option<SecuritySpec>,
    timeout: f64,
) -> PyResult<String> {
    let url = parse_worker_url(url).map_err(PyValueError::new_err)?;
    let timeout = Duration::try_from_secs_f64(timeout)
        .map_err(|e| PyValueError::new_err(format!("timeout: {e}")))?;
    let channels = WorkerChannels::new(Security::try_from(security)?);
    runtime::wait_for(py, async move {
        check(&channels, &url, timeout).await.map_err(to_py_err)
    })
}
