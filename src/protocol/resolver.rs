//! Where the workers are: a fixed URL list or a Python callable asked at each query's planning.
use datafusion::common::{exec_datafusion_err, DataFusionError, Result};
use datafusion_distributed::WorkerResolver;
use pyo3::prelude::*;
use url::Url;

use super::urls::parse_worker_url;

pub enum Workers {
    Static(Vec<Url>),
    /// A Python callable returning a list of URL strings.
    Callable(Py<PyAny>),
}

impl Workers {
    /// Resolves the current URL list, validating every entry.
    pub fn urls(&self) -> Result<Vec<Url>> {
        match self {
            Workers::Static(urls) => Ok(urls.clone()),
            Workers::Callable(f) => crate::interpreter::attach(|py| {
                let raw: Vec<String> = f
                    .call0(py)
                    .and_then(|v| v.extract(py))
                    .map_err(|e| exec_datafusion_err!("worker resolver failed: {e}"))?;
                if raw.is_empty() {
                    return Err(exec_datafusion_err!(
                        "worker resolver returned no worker URLs"
                    ));
                }
                raw.iter()
                    .map(|u| parse_worker_url(u).map_err(DataFusionError::Configuration))
                    .collect()
            })
            .unwrap_or_else(|| Err(exec_datafusion_err!("the Python interpreter is exiting"))),
        }
    }
}

/// Resolver handed to the distributed planner: a snapshot of the URLs taken at planning time,
/// so one query plans and runs against one consistent worker set.
pub struct FixedResolver(pub Vec<Url>);

impl WorkerResolver for FixedResolver {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.clone())
    }
}
