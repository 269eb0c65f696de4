//! `SnapshotTable` and `WireCodec` as Python sees them: a table provider over a table
//! format's snapshot (`datafusion_distributed_py.lakehouse`), and the codec that lets its scan
//! travel to workers; and `ReaderTable`, a table read by its format's own Python reader.
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use datafusion::arrow::ipc::convert::try_schema_from_ipc_buffer;
use datafusion::arrow::record_batch::RecordBatchReader;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion_ffi::execution::FFI_TaskContextProvider;
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::capsule;
use super::errors::to_py_err;
use crate::codec::{PartialSort, SortColumn};
use crate::file_stream::{Announced, FileStreamSpec};
use crate::object_stores::StoreSpec;
use crate::runtime;
use crate::runtime::interpreter;
use crate::table_providers::{self, BatchSource, ColumnStats, SnapshotFile, SnapshotSource};

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

#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct SnapshotTable {
    table: Arc<table_providers::SnapshotTable>,
}

#[pymethods]
impl SnapshotTable {
    /// `schema`: the table's Arrow schema as IPC bytes (`pa.Schema.serialize()`), columns in
    /// the table's order; `partitions_in_files`: whether the files hold the partition columns
    /// (Iceberg) or the scan adds them from the partition values (Delta); `files`: `(url,
    /// size, rows or None, partition values as strings, [(column, min, max, null count)])`,
    /// bounds as strings, as the log records them; `source`: a callable listing the current
    /// files at each scan (a table that follows its log), or None; `stores`: `(url, kind,
    /// options)` of the stores the files live on; `format`: the files' format, `"parquet"`,
    /// `"json"` (newline-delimited) or `"arrow"` (IPC files).
    #[new]
    #[pyo3(signature = (name, schema, partition_columns, partitions_in_files, files, source, stores, format = "parquet"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        schema: &[u8],
        partition_columns: Vec<String>,
        partitions_in_files: bool,
        files: Vec<PyFile>,
        source: Option<Py<PyAny>>,
        stores: Vec<(String, String, BTreeMap<String, String>)>,
        format: &str,
    ) -> PyResult<Self> {
        let format: table_providers::FileFormat = format.parse().map_err(to_py_err)?;
        let schema = try_schema_from_ipc_buffer(schema)
            .map_err(|e| PyValueError::new_err(format!("not an Arrow IPC schema: {e}")))?;
        let source = source.map(|s| Box::new(PythonSource(s)) as Box<dyn SnapshotSource>);
        let table = table_providers::SnapshotTable::new(
            name,
            Arc::new(schema),
            partition_columns,
            partitions_in_files,
            &to_files(files),
            source,
            stores.into_iter().map(StoreSpec::from).collect(),
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

/// The codec of snapshot scans, for `ctx.with_physical_extension_codec`.
#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct WireCodec {
    /// The session whose task context decoding uses.
    session: Py<PyAny>,
    codec: Arc<crate::codec::WireCodec>,
}

#[pymethods]
impl WireCodec {
    #[new]
    fn new(session: Py<PyAny>) -> Self {
        Self {
            session,
            codec: Arc::default(),
        }
    }

    /// (name, is_distinct) of the recursive queries of the next plan serialised through this
    /// codec, in the order the serialiser meets them (depth first).
    fn announce_recursive_queries(&self, queries: Vec<(String, bool)>) {
        self.codec.announce_recursive_queries(queries);
    }

    /// The partial sorts of the next plan serialised through this codec, as their displays
    /// tell them: `(columns (name, index, descending, nulls_first), common prefix, fetch)`.
    fn announce_partial_sorts(&self, sorts: Vec<(Vec<SortColumn>, usize, Option<usize>)>) {
        let sorts = sorts
            .into_iter()
            .map(|(columns, common_prefix_length, fetch)| PartialSort {
                columns,
                common_prefix_length,
                fetch,
                preserve_partitioning: false,
            })
            .collect();
        self.codec.announce_partial_sorts(sorts);
    }

    /// The unbounded file tables (specs from `unbounded_table`) the next plan serialised
    /// through this codec scans, and the limit of its scans of them.
    fn announce_streams(&self, tables: Vec<String>, fetch: Option<usize>) -> PyResult<()> {
        let tables = tables
            .iter()
            .map(|t| FileStreamSpec::from_json(t))
            .collect::<Result<Vec<_>>>()
            .map_err(to_py_err)?;
        self.codec.announce_streams(Announced { tables, fetch });
        Ok(())
    }

    /// The FFI codec protocol of datafusion-python.
    #[pyo3(signature = (session = None))]
    fn __datafusion_physical_extension_codec__<'py>(
        &self,
        py: Python<'py>,
        session: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let own = self.session.bind(py);
        let session = session.filter(|s| !s.is_none()).unwrap_or(own);
        let task_ctx_provider: FFI_TaskContextProvider = capsule::import(
            session,
            "__datafusion_task_context_provider__",
            "datafusion_task_context_provider",
        )?;
        let codec = FFI_PhysicalExtensionCodec::new(
            Arc::clone(&self.codec) as _,
            Some(runtime::handle()),
            task_ctx_provider,
        );
        capsule::export(py, codec, "datafusion_physical_extension_codec")
    }
}

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
