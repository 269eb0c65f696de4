//! `Coordinator`: the Python handle on a [`ClusterPlanner`] (embedded or remote workers).
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::capsule;
use super::errors::to_py_err;
use super::kept_insert::KeptInsert;
use super::kept_table::{self, KeptTable};
use super::plan::DistributedPlan;
use super::request::{Handshake, Request};
use super::security::SecuritySpec;
use crate::coordinator::{ClusterPlanner, DistributedTable, InsertProvider};
use crate::protocol::{display_url, parse_worker_url, ListWorkers, Workers};
use crate::runtime;
use crate::security::Security;
use crate::worker::{Budget, EmbeddedCluster};
use crate::VERSION;
use datafusion::arrow::ffi_stream::ArrowArrayStreamReader;
use datafusion::arrow::record_batch::RecordBatchReader;

#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct Coordinator {
    planner: Arc<ClusterPlanner>,
}

#[pymethods]
impl Coordinator {
    /// A coordinator over `n_workers` workers in this process, whose tasks share one memory
    /// pool of `memory_limit` bytes (None: unbounded) and spill to `spill_dirs` (none: the
    /// system's temporary directory), at most `max_spill_bytes` there.
    #[staticmethod]
    #[pyo3(signature = (n_workers, memory_limit = None, spill_dirs = vec![], max_spill_bytes = None))]
    fn embedded(
        n_workers: usize,
        memory_limit: Option<usize>,
        spill_dirs: Vec<std::path::PathBuf>,
        max_spill_bytes: Option<u64>,
    ) -> PyResult<Self> {
        if n_workers == 0 {
            return Err(PyValueError::new_err("n_workers must be at least 1"));
        }
        let budget = Budget {
            memory_limit,
            spill_dirs,
            max_spill_bytes,
        };
        let runtime_env = budget.runtime_env().map_err(to_py_err)?;
        Ok(Self {
            planner: Arc::new(ClusterPlanner::embedded(runtime_env, |runtime| {
                EmbeddedCluster::start(n_workers, runtime, VERSION)
            })),
        })
    }

    /// A coordinator over remote workers: a list of URLs, or a callable returning one;
    /// `security` is `Security._to_core()` (token, TLS) or None.
    #[staticmethod]
    #[pyo3(signature = (workers, security = None))]
    fn remote(workers: &Bound<'_, PyAny>, security: Option<SecuritySpec>) -> PyResult<Self> {
        let security = Security::try_from(security)?;
        let workers = if workers.is_callable() {
            Workers::Resolver(Box::new(PythonResolver(workers.clone().unbind())))
        } else {
            let raw: Vec<String> = workers.extract()?;
            if raw.is_empty() {
                return Err(PyValueError::new_err("workers must name at least one URL"));
            }
            let urls = raw
                .iter()
                .map(|u| parse_worker_url(u))
                .collect::<Result<Vec<_>, _>>()
                .map_err(PyValueError::new_err)?;
            Workers::Static(urls)
        };
        Ok(Self {
            planner: Arc::new(ClusterPlanner::remote(workers, security)),
        })
    }

    /// The worker URLs a query planned now would use.
    fn worker_urls(&self) -> PyResult<Vec<String>> {
        let urls = self.planner.urls().map_err(to_py_err)?;
        Ok(urls.iter().map(|u| display_url(u).to_owned()).collect())
    }

    /// The kept tables on these workers: `(id, name, shares)` (see `KeptTable.shares`).
    fn kept_tables<'py>(&self, py: Python<'py>) -> PyResult<Vec<kept_table::KeptRow<'py>>> {
        let mine = crate::coordinator::all_kept_tables()
            .into_iter()
            .filter(|t| t.is_on(&self.planner))
            .collect();
        kept_table::rows(py, mine)
    }

    /// How each worker is doing: dicts of `url`, `error` (None when it answered),
    /// `rss_bytes`, `cpu_percent` and `running_tasks`.
    fn worker_status<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let planner = Arc::clone(&self.planner);
        let status = runtime::wait_for(py, async move {
            planner.worker_status().await.map_err(to_py_err)
        })?;
        status
            .into_iter()
            .map(|w| {
                let d = PyDict::new(py);
                d.set_item("url", w.url)?;
                d.set_item("error", w.error)?;
                d.set_item("rss_bytes", w.rss_bytes)?;
                d.set_item("cpu_percent", w.cpu_percent)?;
                d.set_item("running_tasks", w.running_tasks)?;
                Ok(d)
            })
            .collect()
    }

    /// The handshake of a query about to be planned, started now: the workers answer while
    /// datafusion-python plans the query (None for in-process workers).
    fn handshake_ahead(&self, min_workers: usize) -> Option<Handshake> {
        self.planner
            .handshake_ahead(min_workers)
            .map(|h| Handshake(Arc::new(h)))
    }

    /// Distributes a physical plan serialised by datafusion-python, as `request` (a
    /// `plan_request.PlanRequest`) describes it.
    fn distribute(&self, py: Python<'_>, request: Request) -> PyResult<DistributedPlan> {
        let request = Arc::new(request.into_plan_request(py)?);
        let planner = Arc::clone(&self.planner);
        let req = Arc::clone(&request);
        let planned =
            runtime::wait_for(
                py,
                async move { planner.plan(&req, 1).await.map_err(to_py_err) },
            )?;
        // Logged here, holding the GIL Python's logging needs: logged by the runtime thread
        // that plans, the record would wait there for the GIL at every query.
        log::info!(
            "planned a distributed query ({} workers listed)",
            planned.workers.len()
        );
        let table = DistributedTable::new(Arc::clone(&self.planner), request, planned);
        Ok(DistributedPlan::new(Arc::new(table)))
    }

    /// Runs a plan as `distribute` takes it and keeps its result on the workers that compute
    /// it, as the kept table `name`. `original`: an in-memory table's rows (anything with
    /// `__arrow_c_stream__`) to send and keep instead, held by the table to send again (then
    /// the request's plan is not read). `replacing`: the kept table whose new contents these
    /// are (a `DELETE` or `UPDATE` of it), retired if no insert changed it meanwhile.
    #[pyo3(signature = (name, request, original = None, replacing = None))]
    fn keep(
        &self,
        py: Python<'_>,
        name: String,
        request: Request,
        original: Option<Bound<'_, PyAny>>,
        replacing: Option<PyRef<'_, KeptTable>>,
    ) -> PyResult<KeptTable> {
        let replacing = replacing.map(|t| Arc::clone(&t.table));
        let original = match original {
            Some(obj) => {
                let reader = ArrowArrayStreamReader::try_new(capsule::import_stream(&obj)?)
                    .map_err(|e| PyValueError::new_err(format!("the table's rows: {e}")))?;
                let schema = reader.schema();
                let batches = reader
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| PyValueError::new_err(format!("the table's rows: {e}")))?;
                Some((schema, batches))
            }
            None => None,
        };
        let request = request.into_plan_request(py)?;
        let planner = Arc::clone(&self.planner);
        let table = runtime::wait_for(py, async move {
            crate::coordinator::KeptTable::keep(planner, &request, name, original, replacing)
                .await
                .map_err(to_py_err)
        })?;
        Ok(KeptTable { table })
    }

    /// `INSERT INTO table <query>` with the query (its rows cast to the table's columns, as
    /// datafusion plans an insert's input) run on the workers, each task keeping its rows
    /// as the table's where it ran: a table whose every scan runs the insert once and
    /// gives its count.
    fn insert(
        &self,
        py: Python<'_>,
        table: PyRef<'_, KeptTable>,
        request: Request,
    ) -> PyResult<KeptInsert> {
        let request = request.into_plan_request(py)?;
        let table = Arc::clone(&table.table);
        Ok(KeptInsert::new(InsertProvider::new(table, request)))
    }
}

/// The user's Python callable returning worker URLs.
struct PythonResolver(Py<PyAny>);

impl ListWorkers for PythonResolver {
    fn list(&self) -> Result<Vec<String>, String> {
        crate::runtime::interpreter::attach(|py| self.0.call0(py).and_then(|v| v.extract(py)))
            .ok_or_else(|| "the Python interpreter is exiting".to_string())?
            .map_err(|e| e.to_string())
    }

    /// The resolver's `starting()` (a `LocalCluster` restarting a dead worker), 0 without one.
    fn starting(&self) -> usize {
        crate::runtime::interpreter::attach(|py| {
            let resolver = self.0.bind(py);
            match resolver.getattr(pyo3::intern!(py, "starting")) {
                Ok(f) => f.call0().and_then(|n| n.extract()).unwrap_or_else(|e| {
                    log::warn!("worker resolver's starting() failed: {e}");
                    0
                }),
                Err(_) => 0,
            }
        })
        .unwrap_or(0)
    }
}
