//! `ReaderTable` as Python sees it: a table read by its format's own Python reader.
use std::sync::Arc;

use datafusion::arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use datafusion::arrow::ipc::convert::try_schema_from_ipc_buffer;
use datafusion::arrow::record_batch::RecordBatchReader;
use datafusion::common::{exec_datafusion_err, Result};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::capsule;
use crate::runtime::interpreter;
use crate::table_providers::{self, BatchSource};

/// A Python callable returning a new `pyarrow.RecordBatchReader` (any object with
/// `__arrow_c_stream__`) over the whole table.
#[derive(Debug)]
struct PythonReader(Py<PyAny>);

impl BatchSource for PythonReader {
    fn open(&self) -> Result<Box<dyn RecordBatchReader + Send>> {
        let stream = interpreter::attach(|py| -> PyResult<FFI_ArrowArrayStream> {
            capsule::import_stream(self.0.call0(py)?.bind(py))
        })
        .ok_or_else(|| exec_datafusion_err!("the interpreter is exiting"))?
        .map_err(|e| exec_datafusion_err!("opening the table's reader: {e}"))?;
        let reader = ArrowArrayStreamReader::try_new(stream)
            .map_err(|e| exec_datafusion_err!("the table's reader: {e}"))?;
        Ok(Box::new(reader))
    }
}

/// A table read through its format's own Python reader, in this process.
#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct ReaderTable {
    table: Arc<table_providers::ReaderTable>,
}

#[pymethods]
impl ReaderTable {
    /// `schema`: the table's Arrow schema as IPC bytes; `open`: a callable returning a new
    /// `pyarrow.RecordBatchReader` of the whole table, called at each scan.
    #[new]
    fn new(name: String, schema: &[u8], open: Py<PyAny>) -> PyResult<Self> {
        let schema = try_schema_from_ipc_buffer(schema)
            .map_err(|e| PyValueError::new_err(format!("not an Arrow IPC schema: {e}")))?;
        let table =
            table_providers::ReaderTable::new(name, Arc::new(schema), Arc::new(PythonReader(open)));
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
