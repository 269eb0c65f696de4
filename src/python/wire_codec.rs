//! `WireCodec` as Python sees it: the codec datafusion-python serialises plans with, which
//! writes our scans (see `codec::WireCodec`).
use std::sync::Arc;

use datafusion::common::Result;
use datafusion_ffi::execution::FFI_TaskContextProvider;
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::capsule;
use super::errors::to_py_err;
use crate::codec::{PartialSort, SortColumn};
use crate::file_stream::{Announced, FileStreamSpec};
use crate::runtime;

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
