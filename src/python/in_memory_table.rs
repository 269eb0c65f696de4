//! `InMemoryTable` as Python sees it: what a Python table function returns in memory.
use std::sync::Arc;

use datafusion::arrow::ffi_stream::ArrowArrayStreamReader;
use datafusion::arrow::record_batch::RecordBatchReader;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::capsule;
use super::errors::to_py_err;
use crate::table_providers;

/// Rows held by DataFusion, for what a Python table function returns in memory (see
/// `table_providers::InMemoryTable`).
#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct InMemoryTable {
    table: Arc<table_providers::InMemoryTable>,
}

#[pymethods]
impl InMemoryTable {
    /// `data`: any object with `__arrow_c_stream__` (a pyarrow table or reader), read whole.
    #[new]
    fn new(name: String, data: &Bound<'_, PyAny>) -> PyResult<Self> {
        let reader = ArrowArrayStreamReader::try_new(capsule::import_stream(data)?)
            .map_err(|e| PyValueError::new_err(format!("not an Arrow stream: {e}")))?;
        let schema = reader.schema();
        let batches = reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| PyValueError::new_err(format!("reading the rows: {e}")))?;
        let table =
            table_providers::InMemoryTable::try_new(name, schema, batches).map_err(to_py_err)?;
        Ok(Self {
            table: Arc::new(table),
        })
    }

    /// The FFI table-provider protocol of datafusion-python (`ctx.register_table`).
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        capsule::export_table(py, session, Arc::clone(&self.table) as _, false)
    }
}
