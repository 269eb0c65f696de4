//! `KeptTable` as Python sees it: a result kept on the workers, registered on the session as
//! a table provider (see `kept`).
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use super::capsule;

#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct KeptTable {
    pub table: Arc<crate::coordinator::KeptTable>,
}

#[pymethods]
impl KeptTable {
    #[getter]
    fn name(&self) -> String {
        self.table.name.clone()
    }

    #[getter]
    fn id(&self) -> String {
        self.table.id.to_string()
    }

    /// Rows it holds now.
    #[getter]
    fn rows(&self) -> u64 {
        self.table.rows()
    }

    /// Where its rows are: dicts of `holder` (a worker URL, or "coordinator"), `parts`,
    /// `rows`, `bytes` and `on_disk_bytes`.
    fn shares<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.table
            .shares()
            .into_iter()
            .map(|s| {
                let d = PyDict::new(py);
                d.set_item("holder", s.holder)?;
                d.set_item("parts", s.parts)?;
                d.set_item("rows", s.rows)?;
                d.set_item("bytes", s.bytes)?;
                d.set_item("on_disk_bytes", s.on_disk_bytes)?;
                Ok(d)
            })
            .collect()
    }

    /// The runs that made it, apart from it: a frame remembering them for `metrics` must
    /// not keep the table (and its rows on the workers) alive.
    fn made_by(&self) -> MadeBy {
        MadeBy {
            runs: self.table.made_by.clone(),
        }
    }

    fn __datafusion_table_provider__<'py>(
        &self,
        py: Python<'py>,
        session: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        capsule::export_table(py, session, Arc::clone(&self.table) as _, false)
    }
}

/// The runs that made a kept table.
#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct MadeBy {
    runs: Vec<crate::coordinator::Run>,
}

#[pymethods]
impl MadeBy {
    /// Per-task records of the runs, as `DistributedPlan.task_metrics` gives them.
    #[pyo3(signature = (wait_s=5.0))]
    fn task_metrics<'py>(&self, py: Python<'py>, wait_s: f64) -> PyResult<Vec<Bound<'py, PyDict>>> {
        super::plan::task_records(py, self.runs.clone(), wait_s)
    }
}

/// The kept table whose id is `id`, while it is held.
#[pyfunction]
pub fn kept_table(id: &str) -> Option<KeptTable> {
    let table = crate::coordinator::all_kept_tables()
        .into_iter()
        .find(|t| t.id.to_string() == id)?;
    Some(KeptTable { table })
}

/// How the physical plan of an `INSERT` into a kept table names its root (the table's id
/// follows), as `SessionContext.sql` plans it.
#[pyfunction]
pub fn append_exec_prefix() -> &'static str {
    crate::coordinator::APPEND_EXEC
}

/// Each kept table still held: `(id, name, shares)`.
pub type KeptRow<'py> = (String, String, Vec<Bound<'py, PyDict>>);

/// Every kept table of this process still held: `(id, name, shares)`.
#[pyfunction]
pub fn kept_tables(py: Python<'_>) -> PyResult<Vec<KeptRow<'_>>> {
    rows(py, crate::coordinator::all_kept_tables())
}

pub fn rows(
    py: Python<'_>,
    tables: Vec<Arc<crate::coordinator::KeptTable>>,
) -> PyResult<Vec<KeptRow<'_>>> {
    tables
        .into_iter()
        .map(|t| {
            let shares = KeptTable {
                table: Arc::clone(&t),
            }
            .shares(py)?;
            Ok((t.id.to_string(), t.name.clone(), shares))
        })
        .collect()
}
