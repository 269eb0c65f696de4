//! `Coordinator`: turns a plan planned by datafusion-python into a distributed plan.
//!
//! The path of a query: datafusion-python plans it single-node and serialises the physical
//! plan with its own codecs (Python UDFs and in-memory batches travel inline). We decode it
//! here with those same codecs (imported over FFI), let datafusion-distributed split it into
//! stages for the current worker set, and hand the result back as a table provider. Each run
//! of the result plans again from the bytes: plan nodes (dynamic filters, join state) must
//! not be executed twice, and the worker set may have changed.
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{
    ChannelResolver, DistributedExec, DistributedExt, GetWorkerInfoRequest, NetworkBoundary,
    NetworkCoalesceExec, SessionStateBuilderExt, Stage,
};
use datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use url::Url;

use crate::channels::WorkerChannels;
use crate::codec::{fragment_codec, import_session_codec};
use crate::cooperative::yield_after_amplifiers;
use crate::embedded::EmbeddedCluster;
use crate::errors::{is_worker_failure, to_py_err, worker_failure};
use crate::generate_series::repair_series_scans;
use crate::memory_tables;
use crate::object_stores::{register_all, to_headers as stores_to_headers, StoreSpec};
use crate::resolver::{display_url, parse_worker_url, FixedResolver, Workers};
use crate::table::{DistributedPlan, DistributedTable};
use crate::tracking::{TaskLog, TrackingChannels, Transport};
use crate::{runtime, VERSION};

/// How long a worker may take to answer the pre-query handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

enum Cluster {
    Embedded(EmbeddedCluster),
    /// Worker processes reached over gRPC; the channels are kept across queries.
    Remote(Workers, WorkerChannels),
}

/// What a query needs to be planned (again): datafusion-python's serialised physical plan,
/// the session codec that can decode it, and the config entries to plan and run with.
pub struct PlanRequest {
    pub plan_bytes: Vec<u8>,
    pub codec: Arc<dyn PhysicalExtensionCodec>,
    pub options: HashMap<String, String>,
    /// Object stores registered on the session, rebuilt on every runtime that reads data.
    pub stores: Vec<StoreSpec>,
    /// Called with `(stage, done, total, worker_url)` as tasks are sent and finish.
    pub progress: Option<Py<PyAny>>,
}

/// A distributed plan and the task context (resolvers, codecs, object stores) it runs with.
pub struct Planned {
    pub plan: Arc<dyn ExecutionPlan>,
    pub task_ctx: Arc<TaskContext>,
    /// Filled while the plan runs: which worker ran which task.
    pub log: Arc<TaskLog>,
}

pub struct ClusterPlanner {
    cluster: Cluster,
    runtime_env: Arc<RuntimeEnv>,
}

#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct Coordinator {
    planner: Arc<ClusterPlanner>,
}

#[pymethods]
impl Coordinator {
    /// A coordinator over `n_workers` workers in this process.
    #[staticmethod]
    fn embedded(n_workers: usize) -> PyResult<Self> {
        if n_workers == 0 {
            return Err(PyValueError::new_err("n_workers must be at least 1"));
        }
        let runtime_env = Arc::new(RuntimeEnv::default());
        let cluster = EmbeddedCluster::start(n_workers, Arc::clone(&runtime_env), VERSION);
        Ok(Self::new(Cluster::Embedded(cluster), runtime_env))
    }

    /// A coordinator over remote workers: a list of URLs, or a callable returning one.
    #[staticmethod]
    fn remote(workers: &Bound<'_, PyAny>) -> PyResult<Self> {
        let workers = if workers.is_callable() {
            Workers::Callable(workers.clone().unbind())
        } else {
            let raw: Vec<String> = workers.extract()?;
            if raw.is_empty() {
                return Err(PyValueError::new_err("workers must name at least one URL"));
            }
            let urls = raw
                .iter()
                .map(|u| parse_worker_url(u))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(PyValueError::new_err)?;
            Workers::Static(urls)
        };
        let channels = WorkerChannels::default();
        Ok(Self::new(
            Cluster::Remote(workers, channels),
            Arc::new(RuntimeEnv::default()),
        ))
    }

    /// The worker URLs a query planned now would use.
    fn worker_urls(&self) -> PyResult<Vec<String>> {
        let urls = self.planner.urls().map_err(to_py_err)?;
        Ok(urls.iter().map(|u| display_url(u).to_owned()).collect())
    }

    /// Distributes a physical plan serialised by datafusion-python.
    ///
    /// `codec` is the session's `datafusion_physical_extension_codec` capsule (or the session);
    /// `options` are config entries (`datafusion.*` from the session, `distributed.*` ours);
    /// `stores` are `(url, kind, options)` of the session's object stores.
    #[pyo3(signature = (plan_bytes, codec, options, stores = vec![], progress = None))]
    #[allow(clippy::too_many_arguments)]
    fn distribute(
        &self,
        py: Python<'_>,
        plan_bytes: Vec<u8>,
        codec: &Bound<'_, PyAny>,
        options: HashMap<String, String>,
        stores: Vec<(String, String, BTreeMap<String, String>)>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<DistributedPlan> {
        let stores = stores.into_iter().map(StoreSpec::from).collect();
        let request = Arc::new(PlanRequest {
            plan_bytes,
            codec: import_session_codec(codec)?,
            options,
            stores,
            progress,
        });
        let planner = Arc::clone(&self.planner);
        let req = Arc::clone(&request);
        let planned = runtime::wait_for(
            py,
            async move { planner.plan(&req).await.map_err(to_py_err) },
        )?;
        Ok(DistributedPlan {
            table: Arc::new(DistributedTable::new(
                Arc::clone(&self.planner),
                request,
                planned,
            )),
        })
    }
}

impl Coordinator {
    fn new(cluster: Cluster, runtime_env: Arc<RuntimeEnv>) -> Self {
        Self {
            planner: Arc::new(ClusterPlanner {
                cluster,
                runtime_env,
            }),
        }
    }
}

impl ClusterPlanner {
    fn urls(&self) -> Result<Vec<Url>> {
        match &self.cluster {
            Cluster::Embedded(c) => Ok(c.urls.clone()),
            Cluster::Remote(w, _) => w.urls(),
        }
    }

    /// Resolves the workers, checks them, decodes the plan and distributes it.
    pub async fn plan(&self, req: &PlanRequest) -> Result<Planned> {
        let urls = self.urls()?;
        if let Cluster::Remote(_, channels) = &self.cluster {
            check_workers(channels, &urls).await?;
        }
        register_all(&self.runtime_env, &req.stores)?;
        let progress = req
            .progress
            .as_ref()
            .map(|p| Python::attach(|py| p.clone_ref(py)));
        let log = Arc::new(TaskLog::with_progress(progress));
        let mut state = self.session_state(urls, &req.options, Arc::clone(&req.codec), &log)?;
        if matches!(self.cluster, Cluster::Remote(..)) && !req.stores.is_empty() {
            state
                .config_mut()
                .set_distributed_passthrough_headers(stores_to_headers(&req.stores))?;
        }
        let task_ctx = state.task_ctx();
        let plan =
            physical_plan_from_bytes_with_extension_codec(&req.plan_bytes, &task_ctx, &*req.codec)?;
        let plan = yield_after_amplifiers(repair_series_scans(plan)?)?;
        let (plan, task_ctx) = distribute_plan(plan, state).await?;
        log::debug!(
            "planned a distributed query over {} workers",
            self.urls()?.len()
        );
        Ok(Planned {
            plan,
            task_ctx,
            log,
        })
    }

    fn session_state(
        &self,
        urls: Vec<Url>,
        options: &HashMap<String, String>,
        codec: Arc<dyn PhysicalExtensionCodec>,
        log: &Arc<TaskLog>,
    ) -> Result<SessionState> {
        let mut cfg = SessionConfig::new();
        cfg.set_distributed_worker_resolver(FixedResolver(urls));
        let fragments = Arc::new(fragment_codec(Arc::clone(&codec)));
        let (inner, transport): (Arc<dyn ChannelResolver + Send + Sync>, _) = match &self.cluster {
            Cluster::Embedded(c) => (Arc::new(c.channels.clone()), Transport::Embedded),
            Cluster::Remote(_, channels) => (Arc::new(channels.clone()), Transport::Remote),
        };
        cfg.set_distributed_channel_resolver(TrackingChannels {
            inner,
            log: Arc::clone(log),
            codec: fragments,
            transport,
        });
        // The session codec also decodes what workers send back (e.g. partitioning).
        cfg.set_distributed_user_codec_arc(codec);
        cfg.set_distributed_desired_task_count_handler(memory_tables::desired_task_count);
        cfg.set_distributed_scale_up_leaf_node_handler(memory_tables::scale_up);
        // Apply `datafusion.*` first so that `distributed.*` keys win any overlap.
        let mut entries: Vec<_> = options.iter().collect();
        entries.sort_by_key(|(k, _)| (k.starts_with("distributed."), k.as_str()));
        for (key, value) in entries {
            match cfg.options_mut().set(key, value) {
                Ok(()) => {}
                // The session's own settings include runtime-env entries that are not config
                // options; those stay with the session.
                Err(e) if key.starts_with("datafusion.") => {
                    log::debug!("not forwarding session setting {key}: {e}")
                }
                Err(e) => {
                    return Err(DataFusionError::Configuration(format!(
                        "config {key}={value}: {e}"
                    )))
                }
            }
        }
        Ok(SessionStateBuilder::new()
            .with_default_features()
            .with_config(cfg)
            .with_runtime_env(Arc::clone(&self.runtime_env))
            .build())
    }
}

/// Runs datafusion-distributed's planner over an existing physical plan. The task context
/// returned carries what the planner registered (routing handlers): execution needs it.
///
/// When the planner finds nothing worth splitting (small inputs, one worker), the plan would
/// run in this process; the user asked for workers, so it becomes one stage run by a worker.
async fn distribute_plan(
    plan: Arc<dyn ExecutionPlan>,
    state: SessionState,
) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>)> {
    let (distributed, task_ctx) = run_planner(Arc::clone(&plan), &state).await?;
    if distributed.is::<DistributedExec>() {
        return Ok((distributed, task_ctx));
    }
    Ok((single_remote_stage(plan)?, task_ctx))
}

/// `plan` as one stage of one task, gathered by the coordinator. datafusion-distributed's
/// planner elides such a stage (it would run locally), so it is assembled here.
fn single_remote_stage(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let boundary = NetworkCoalesceExec::try_new(plan, 1, 1)?;
    let Stage::Local(stage) = boundary.input_stage() else {
        return Err(DataFusionError::Internal(
            "new boundary without a local stage".into(),
        ));
    };
    let mut stage = stage.clone();
    stage.query_id = uuid::Uuid::new_v4();
    stage.num = 1;
    let boundary: Arc<dyn ExecutionPlan> = boundary.with_input_stage(Stage::Local(stage))?;
    // The coordinator's head gathers the stage (and gives the renderer a node above it).
    let head = Arc::new(CoalescePartitionsExec::new(boundary));
    Ok(Arc::new(
        DistributedExec::new(head).with_metrics_collection(true),
    ))
}

/// datafusion-distributed's planner wraps the query planner a state has (so it must be set
/// first): we give it one that returns our already-planned physical plan.
async fn run_planner(
    plan: Arc<dyn ExecutionPlan>,
    base: &SessionState,
) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>)> {
    let state = SessionStateBuilder::new_from_existing(base.clone())
        .with_query_planner(Arc::new(Precomputed(Mutex::new(Some(plan)))))
        .with_distributed_planner()
        .build();
    let empty = LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: false,
        schema: Arc::new(DFSchema::empty()),
    });
    let plan = state
        .query_planner()
        .create_physical_plan(&empty, &state)
        .await?;
    Ok((plan, state.task_ctx()))
}

/// Asks every worker for its version before a query is sent: a down worker or a worker of
/// another release is reported by URL, quickly, instead of failing mid-query.
async fn check_workers(channels: &WorkerChannels, urls: &[Url]) -> Result<()> {
    let checks = urls.iter().map(|url| async move {
        let shown = display_url(url);
        let info = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
            let mut client = channels.get_worker_client_for_url(url).await?;
            client.get_worker_info(GetWorkerInfoRequest {}).await
        })
        .await;
        match info {
            Err(_) => Err(worker_failure(format!(
                "worker {shown} did not answer within {}s",
                HANDSHAKE_TIMEOUT.as_secs()
            ))),
            Ok(Err(e)) if is_worker_failure(&e) => Err(e),
            Ok(Err(e)) => Err(worker_failure(format!(
                "worker {shown} is unreachable: {}",
                e.find_root().message()
            ))),
            Ok(Ok(info)) if info.version != VERSION => Err(worker_failure(format!(
                "worker {shown} runs datafusion-distributed-py {}, but this coordinator runs \
                 {VERSION}; run the same release on the coordinator and every worker",
                if info.version.is_empty() {
                    "<unknown>"
                } else {
                    &info.version
                }
            ))),
            Ok(Ok(_)) => Ok(()),
        }
    });
    futures::future::try_join_all(checks).await.map(|_| ())
}

#[derive(Debug)]
struct Precomputed(Mutex<Option<Arc<dyn ExecutionPlan>>>);

#[async_trait]
impl QueryPlanner for Precomputed {
    async fn create_physical_plan(
        &self,
        _logical_plan: &LogicalPlan,
        _session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.0
            .lock()
            .expect("poisoned")
            .take()
            .ok_or_else(|| DataFusionError::Internal("plan already distributed".into()))
    }
}
