//! `KeptInsert`: a distributed `INSERT INTO` a kept table as Python sees it, a table provider
//! whose every scan runs the insert once and gives its count (see `coordinator::kept_append`).
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::capsule;
use crate::coordinator::InsertProvider;

#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct KeptInsert {
    provider: Arc<InsertProvider>,
}

impl KeptInsert {
    pub fn new(provider: InsertProvider) -> Self {
        Self {
            provider: Arc::new(provider),
        }
    }
}

#[pymethods]
impl KeptInsert {
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        capsule::export_table(py, session, Arc::clone(&self.provider) as _, false)
    }
}
