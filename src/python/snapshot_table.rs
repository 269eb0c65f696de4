//! `SnapshotTable` as Python sees it: a table provider over a table format's snapshot
//! (`datafusion_distributed_py.lakehouse`), whose scan `WireCodec` lets travel to workers.
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::ipc::convert::try_schema_from_ipc_buffer;
use datafusion::common::{exec_datafusion_err, Result};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};

use super::capsule;
use super::errors::to_py_err;
use crate::object_stores::StoreSpec;
use crate::runtime::interpreter;
use crate::table_providers::{self, ColumnStats, SnapshotFile, SnapshotSource};

/// A data file as Python lists it: `(url, size, rows, partition values, column statistics)`.
type PyFile = (
    String,
    u64,
    Option<u64>,
    Vec<Option<String>>,
    Vec<ColumnStats>,
);

fn to_files(files: Vec<PyFile>) -> Vec<SnapshotFile> {
    files
        .into_iter()
        .map(
            |(url, size, rows, partition_values, columns)| SnapshotFile {
                url,
                size,
                rows,
                partition_values,
                columns,
            },
        )
        .collect()
}

/// A Python callable returning the table's current files (`list[PyFile]`).
#[derive(Debug)]
struct PythonSource(Py<PyAny>);

impl SnapshotSource for PythonSource {
    fn files(&self) -> Result<Vec<SnapshotFile>> {
        let listed = interpreter::attach(|py| {
            self.0
                .call0(py)
                .and_then(|files| files.extract::<Vec<PyFile>>(py))
                .map_err(|e| exec_datafusion_err!("reading the table's snapshot: {e}"))
        })
        .ok_or_else(|| exec_datafusion_err!("the interpreter is exiting"))??;
        Ok(to_files(listed))
    }
}

/// What a snapshot table is built from, as Python hands it over (the `core_specs.SnapshotSpec`
/// dataclass, read attribute by attribute).
#[derive(FromPyObject)]
pub struct SnapshotSpec {
    #[pyo3(attribute)]
    name: String,
    /// The table's Arrow schema as IPC bytes (`pa.Schema.serialize()`), columns in the
    /// table's order.
    #[pyo3(attribute)]
    schema: Py<PyBytes>,
    #[pyo3(attribute)]
    partition_columns: Vec<String>,
    /// Whether the files hold the partition columns (Iceberg) or the scan adds them from the
    /// partition values (Delta).
    #[pyo3(attribute)]
    partitions_in_files: bool,
    /// `(url, size, rows or None, partition values as strings, [(column, min, max, null
    /// count)])`, bounds as strings, as the log records them.
    #[pyo3(attribute)]
    files: Vec<PyFile>,
    /// A callable listing the current files at each scan (a table that follows its log), or
    /// None.
    #[pyo3(attribute)]
    source: Option<Py<PyAny>>,
    /// `(url, kind, options)` of the stores the files live on.
    #[pyo3(attribute)]
    stores: Vec<(String, String, BTreeMap<String, String>)>,
    /// The files' format: `"parquet"`, `"json"` (newline-delimited), `"arrow"` (IPC files) or
    /// `"avro"`.
    #[pyo3(attribute)]
    format: String,
}

#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct SnapshotTable {
    table: Arc<table_providers::SnapshotTable>,
}

#[pymethods]
impl SnapshotTable {
    /// `spec`: a `core_specs.SnapshotSpec`.
    #[new]
    fn new(py: Python<'_>, spec: SnapshotSpec) -> PyResult<Self> {
        let format: table_providers::FileFormat = spec.format.parse().map_err(to_py_err)?;
        let schema = try_schema_from_ipc_buffer(spec.schema.bind(py).as_bytes())
            .map_err(|e| PyValueError::new_err(format!("not an Arrow IPC schema: {e}")))?;
        let source = spec
            .source
            .map(|s| Box::new(PythonSource(s)) as Box<dyn SnapshotSource>);
        let table = table_providers::SnapshotTable::new(
            spec.name,
            Arc::new(schema),
            spec.partition_columns,
            spec.partitions_in_files,
            &to_files(spec.files),
            source,
            spec.stores.into_iter().map(StoreSpec::from).collect(),
        )
        .map_err(to_py_err)?
        .with_format(format);
        Ok(Self {
            table: Arc::new(table),
        })
    }

    /// How many data files the latest scan saw.
    #[getter]
    fn file_count(&self) -> usize {
        self.table.file_count()
    }

    /// The FFI table-provider protocol of datafusion-python (`ctx.register_table`).
    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // Filters are pushed down (partition pruning): they cross as expressions.
        capsule::export_table(py, session, Arc::clone(&self.table) as _, true)
    }
}
