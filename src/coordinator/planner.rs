//! `ClusterPlanner`: plans a query serialised by datafusion-python for the current workers.
//!
//! The path of a query: datafusion-python plans it single-node and serialises the physical
//! plan with its own codecs (Python UDFs and in-memory batches travel inline). We decode it
//! here with those same codecs (imported over FFI), let datafusion-distributed split it into
//! stages for the current worker set, and hand the result back as a table provider. Each run
//! of the result plans again from the bytes: plan nodes (dynamic filters, join state) must
//! not be executed twice, and the worker set may have changed.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::common::stats::Precision;
use datafusion::common::{DataFusionError, Result, SchemaExt};
use datafusion::config::ConfigOptions;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{ChannelResolver, DistributedExt};
use datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use url::Url;

use super::adaptive_joins::{self, Adaptive};
use super::distribute::{distribute_plan, planning_state};
use super::handshake::{
    answers_of, lost_workers, usable_workers, EarlyHandshake, Functions, Quarantine,
};
use super::lineage::Sources;
use super::live::{busy, tasks_of, watch, Observer, WorkerStatus};
use super::load;
use super::settings::{apply_options, settle_compression};
use super::step_clock::StepClock;
use super::subqueries;
use super::task_log::{ProgressSink, TaskLog};
use super::tracking::{TrackingChannels, Transport};
use crate::checks;
use crate::codec::{
    fragment_codec, repair_decoded, restore_window_filters, window_function_headers, SessionCodec,
};
use crate::errors::{
    as_not_distributable, as_worker_failure, is_rejected_credentials, is_worker_failure,
    is_worker_lost, not_distributable, FailureKind,
};
use crate::kept;
use crate::object_stores::{register_all, to_headers as stores_to_headers, StoreSpec};
use crate::operators::SumCounts;
use crate::plan_rewrites::{self, CompressedTable};
use crate::protocol::display_url;
use crate::protocol::{FixedResolver, InProcessWorkers, WorkerChannels, Workers};
use crate::scan_tasks;
use crate::security::Security;
use crate::spool::Spool;

enum Cluster {
    Embedded(InProcessWorkers),
    /// Worker processes reached over gRPC; the channels and the quarantine of lost workers are
    /// kept across queries.
    Remote(Workers, WorkerChannels, Quarantine),
}

/// What a query needs to be planned (again): datafusion-python's serialised physical plan,
/// the session codec that can decode it, and the config entries to plan and run with.
pub struct PlanRequest {
    pub plan_bytes: Vec<u8>,
    /// The plan itself, when it was made here rather than by datafusion-python (a kept
    /// table's rows sent again): planned from this, not from `plan_bytes`.
    pub plan: Option<Arc<dyn ExecutionPlan>>,
    /// The compressed tables the plan reads (their compression is not in `plan_bytes`).
    pub compressed_tables: Vec<CompressedTable>,
    /// The plan's window expressions that have a `FILTER` (logical, `Expr.to_bytes()`): their
    /// filters are not in `plan_bytes` (`codec::restore_window_filters`).
    pub window_filters: Vec<Vec<u8>>,
    pub codec: Arc<SessionCodec>,
    pub options: HashMap<String, String>,
    /// Object stores registered on the session, rebuilt on every runtime that reads data.
    pub stores: Vec<StoreSpec>,
    /// Told as tasks are sent and finish.
    pub progress: Option<Arc<dyn ProgressSink>>,
    /// What must live as long as the plan: the session the codec reaches through a weak FFI
    /// reference (the Python `SessionContext`).
    pub keep_alive: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Fewer usable workers than this fails the query.
    pub min_workers: usize,
    /// Runs of the query after the first when a worker is lost before the first batch.
    pub max_retries: usize,
    /// The query writes (`COPY`, `INSERT`): it runs again only when its write is staged.
    pub writes: bool,
    /// How often running tasks' rows are asked for while a progress callback listens (zero:
    /// never; progress then moves as tasks end).
    pub live_interval: std::time::Duration,
    /// How long a reader of the result may wait while nothing of the query moves before the
    /// query fails as stalled (None: forever; see `stall_guard`).
    pub stall_timeout: Option<std::time::Duration>,
    /// What the run is for: a query's rows, rows kept on the workers, or our own work.
    pub role: Role,
    /// With `Role::Keep`: the schema of the table the rows join (`INSERT`), which they are
    /// held as (see `KeepExec`); None for a new table, held as the query's rows.
    pub keep_as: Option<datafusion::arrow::datatypes::SchemaRef>,
    /// With `fault_tolerance="task"`: where the tasks of the query's worker stages spool
    /// their output (see `spool`).
    pub spool_dir: Option<std::path::PathBuf>,
    /// The workers' handshake for this query, started before it was planned (see
    /// [`ClusterPlanner::handshake_ahead`]).
    pub early_handshake: Option<Arc<EarlyHandshake>>,
}

/// What a run of a [`PlanRequest`] is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The query's rows, to the caller.
    Query,
    /// The query's rows kept where its last stage computes them, as this kept table's parts
    /// (numbered from `task_base`: a table sent in several runs numbers each run's apart).
    Keep { table: uuid::Uuid, task_base: u32 },
    /// A plan of our own nodes (reading kept parts back, freeing them) that names its parts.
    Internal,
}

impl PlanRequest {
    /// This request, run to keep its rows as kept table `table`'s parts.
    pub fn keeping(&self, table: uuid::Uuid, task_base: u32) -> Self {
        let mut kept = self.running(self.plan_bytes.clone());
        kept.plan = self.plan.clone();
        kept.compressed_tables = self.compressed_tables.clone();
        kept.window_filters = self.window_filters.clone();
        kept.role = Role::Keep { table, task_base };
        kept.keep_as = self.keep_as.clone();
        kept.progress = self.progress.clone();
        kept
    }

    /// This request, its progress told to `other`'s callback (a kept table's first making,
    /// from its detached lineage).
    pub fn reporting_to(mut self, other: &PlanRequest) -> Self {
        self.progress = other.progress.clone();
        self
    }

    /// This request, run to append its rows to the kept table of `schema` as the parts held
    /// under store id `id`.
    pub fn appending(
        &self,
        id: uuid::Uuid,
        schema: datafusion::arrow::datatypes::SchemaRef,
    ) -> Self {
        let mut kept = self.keeping(id, 0);
        kept.keep_as = Some(schema);
        kept
    }

    /// A request for `plan` (made here) with this request's settings and no progress.
    pub fn running_plan(&self, plan: Arc<dyn ExecutionPlan>) -> Self {
        let mut request = self.running(Vec::new());
        request.plan = Some(plan);
        request
    }

    /// This request without what ties it to Python objects (the progress callback, the
    /// session), for holding beyond the call that made it: a kept table's lineage, held by
    /// the session the table is registered on, must not hold that session in its turn.
    pub fn detached(&self) -> Self {
        let mut detached = self.running(self.plan_bytes.clone());
        detached.plan = self.plan.clone();
        detached.compressed_tables = self.compressed_tables.clone();
        detached.window_filters = self.window_filters.clone();
        detached.role = self.role;
        detached.keep_as = self.keep_as.clone();
        detached.keep_alive = None;
        detached
    }

    /// A request for `plan_bytes` (encoded with this request's codec) with its settings, and
    /// no progress: our own work.
    pub fn running(&self, plan_bytes: Vec<u8>) -> Self {
        Self {
            plan_bytes,
            plan: None,
            compressed_tables: Vec::new(),
            window_filters: Vec::new(),
            codec: Arc::clone(&self.codec),
            options: self.options.clone(),
            stores: self.stores.clone(),
            progress: None,
            keep_alive: self.keep_alive.clone(),
            min_workers: self.min_workers,
            max_retries: self.max_retries,
            writes: false,
            live_interval: std::time::Duration::ZERO,
            stall_timeout: self.stall_timeout,
            role: Role::Internal,
            keep_as: None,
            spool_dir: None,
            early_handshake: None,
        }
    }
}

/// A distributed plan and the task context (resolvers, codecs, object stores) it runs with.
pub struct Planned {
    pub plan: Arc<dyn ExecutionPlan>,
    pub task_ctx: Arc<TaskContext>,
    /// Filled while the plan runs: which worker ran which task.
    pub log: Arc<TaskLog>,
    /// The worker set it was planned for (as the resolver gave it).
    pub workers: Vec<Url>,
    /// The query's row count when its statistics know it exactly (what single-node's
    /// `count()` answers from, without running anything).
    pub exact_rows: Option<usize>,
    /// For a run that keeps its rows: their schema (the plan's own is the tasks' summary).
    pub kept_schema: Option<datafusion::arrow::datatypes::SchemaRef>,
    /// The data it reads (files, kept tables) as it was when planned.
    pub sources: Sources,
    /// Whether it may run again after a worker was lost at any point: it reads, or it writes
    /// through a staged commit (`SumCounts`), which leaves nothing of a failed run behind.
    pub repeatable: bool,
    /// Where its worker stages spool their output, with `fault_tolerance="task"`.
    pub spool: Option<Spool>,
    /// How long each step of planning it took.
    pub clock: StepClock,
}

/// The longest a run again after a lost worker waits for the replacements a cluster starts.
const REPLACEMENT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A query's options (by key), and `base`'s config options with them applied.
type Applied = (HashMap<String, String>, Arc<ConfigOptions>);

pub struct ClusterPlanner {
    cluster: Cluster,
    runtime_env: Arc<RuntimeEnv>,
    /// What each query's session state is cloned from (see [`planning_state`]).
    base: SessionState,
    /// Asks workers for their running tasks' rows, memory and CPU.
    observer: Arc<Observer>,
    /// The options of the latest query and `base`'s with them applied: a session's settings
    /// rarely change between queries, and applying some 200 of them costs more than cloning.
    applied: Mutex<Option<Applied>>,
}

impl ClusterPlanner {
    /// Over workers in this process that `start` starts on `runtime_env` (their memory pool
    /// and disk), which this planner shares (and so its object stores).
    pub fn embedded(
        runtime_env: Arc<RuntimeEnv>,
        start: impl FnOnce(Arc<RuntimeEnv>) -> InProcessWorkers,
    ) -> Self {
        let cluster = start(Arc::clone(&runtime_env));
        let observer = Observer::embedded(cluster.channels.by_url().clone());
        Self {
            cluster: Cluster::Embedded(cluster),
            base: planning_state(Arc::clone(&runtime_env)),
            runtime_env,
            observer: Arc::new(observer),
            applied: Mutex::default(),
        }
    }

    /// Over worker processes reached by URL, with `security`'s token and TLS.
    pub fn remote(workers: Workers, security: Security) -> Self {
        let channels = WorkerChannels::new(security);
        let runtime_env = Arc::new(RuntimeEnv::default());
        Self {
            observer: Arc::new(Observer::Remote(channels.clone())),
            cluster: Cluster::Remote(workers, channels, Quarantine::default()),
            base: planning_state(Arc::clone(&runtime_env)),
            runtime_env,
            applied: Mutex::default(),
        }
    }

    /// What `log`'s run is doing now: the rows its running tasks produced so far, and whether
    /// any worker it runs on is using CPU.
    pub async fn activity(&self, log: &TaskLog) -> (u64, bool) {
        let Some((query_id, urls)) = log.running() else {
            return (0, false);
        };
        let answers = futures::future::join_all(urls.iter().map(|u| self.observer.ask(u))).await;
        let mut rows = 0;
        let mut working = false;
        for answer in answers.iter().flatten() {
            working |= busy(
                answer
                    .worker_metrics
                    .as_ref()
                    .map_or(0.0, |m| m.cpu_usage_percent),
            );
            rows += tasks_of(answer, &query_id).map(|(_, n)| n).sum::<u64>();
        }
        (rows, working)
    }

    /// How each worker is doing: memory, CPU, running tasks, or why it does not answer.
    pub async fn worker_status(&self) -> Result<Vec<WorkerStatus>> {
        Ok(self.observer.status(&self.urls()?).await)
    }

    /// The handshake of a query about to be planned, started now on the runtime (None for
    /// in-process workers, which need none, or when the workers cannot be listed now: the
    /// planning then says why).
    pub fn handshake_ahead(self: &Arc<Self>, min_workers: usize) -> Option<EarlyHandshake> {
        let Cluster::Remote(..) = &self.cluster else {
            return None;
        };
        let urls = self.urls().ok()?;
        let (planner, asked) = (Arc::clone(self), urls.clone());
        let answers = crate::runtime::handle().spawn(async move {
            let Cluster::Remote(_, channels, quarantine) = &planner.cluster else {
                unreachable!("checked above");
            };
            usable_workers(channels, &asked, quarantine, min_workers).await
        });
        Some(EarlyHandshake::new(urls, answers))
    }

    pub fn is_embedded(&self) -> bool {
        matches!(self.cluster, Cluster::Embedded(_))
    }

    pub fn urls(&self) -> Result<Vec<Url>> {
        match &self.cluster {
            Cluster::Embedded(c) => Ok(c.urls.clone()),
            Cluster::Remote(w, ..) => w.urls(),
        }
    }

    /// The first of the workers that is lost now, as the error saying so (none in-process).
    pub async fn find_lost(&self) -> Option<DataFusionError> {
        let Cluster::Remote(_, channels, quarantine) = &self.cluster else {
            return None;
        };
        let urls = self.urls().ok()?;
        let mut lost = lost_workers(channels, &urls).await;
        // A worker whose connection is refused is gone; one slow to answer may only be busy.
        lost.sort_by_key(|e| {
            as_worker_failure(e).is_some_and(|f| f.kind == FailureKind::StoppedAnswering)
        });
        let first = lost.into_iter().next()?;
        if let Some(url) = as_worker_failure(&first)
            .and_then(|f| f.worker.as_deref())
            .and_then(|w| urls.iter().find(|u| display_url(u) == w))
        {
            quarantine.put(url);
        }
        Some(first)
    }

    /// Whether the worker `named` (as a failure names it) is still one of the workers, and
    /// it and every other worker answer a fresh handshake: then the stream it broke was the
    /// query's own failure there, not a lost worker (a worker is called dead only when it does
    /// not answer).
    pub async fn every_worker_answers(&self, named: &str) -> bool {
        let Cluster::Remote(_, channels, _) = &self.cluster else {
            return false;
        };
        let Ok(urls) = self.urls() else {
            return false;
        };
        // A worker replaced since (a LocalCluster restarts the dead) is no longer listed.
        urls.iter().any(|u| display_url(u) == named)
            && lost_workers(channels, &urls).await.is_empty()
    }

    /// Waits (at most `REPLACEMENT_WAIT`) for the workers the cluster says it is starting: a
    /// run again after a lost worker then has the replacement's share of the machine, not
    /// only the workers left (a `LocalCluster` restarts a dead worker in under a second).
    async fn await_starting(&self) {
        let Cluster::Remote(workers, ..) = &self.cluster else {
            return;
        };
        let start = std::time::Instant::now();
        let mut told = false;
        loop {
            let starting = workers.starting();
            if starting == 0 || start.elapsed() >= REPLACEMENT_WAIT {
                break;
            }
            if !std::mem::replace(&mut told, true) {
                log::info!("waiting for the {starting} worker(s) the cluster is starting");
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// Resolves the workers, leaves out the lost ones, decodes the plan and distributes it;
    /// `attempt` counts the runs of this query (1 for the first). Scalar subqueries run while
    /// planning: a worker lost meanwhile is left out and planning starts again, up to
    /// `max_retries` times.
    ///
    /// A boxed `Send` future: planning can run a query first (a kept table's parts made again),
    /// which plans in its turn, and a recursive future must name its type.
    pub fn plan<'a>(
        &'a self,
        req: &'a PlanRequest,
        attempt: usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Planned>> + Send + 'a>> {
        self.plan_spooled(req, attempt, None)
    }

    /// `plan`, for run `attempt` of a scan whose runs spool to `spool` (the first run of a
    /// spooling scan passes None and gets a new one).
    pub fn plan_spooled<'a>(
        &'a self,
        req: &'a PlanRequest,
        attempt: usize,
        spool: Option<Spool>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Planned>> + Send + 'a>> {
        Box::pin(async move {
            let mut retries = if req.writes { 0 } else { req.max_retries };
            if attempt > 1 {
                self.await_starting().await;
            }
            loop {
                match self.plan_once(req, attempt, spool.clone()).await {
                    Err(e) if retries > 0 && is_worker_lost(&e) => {
                        log::warn!("{e}: planning the query again on the workers left");
                        self.find_lost().await;
                        self.await_starting().await;
                        retries -= 1;
                    }
                    planned => return planned,
                }
            }
        })
    }

    async fn plan_once(
        &self,
        req: &PlanRequest,
        attempt: usize,
        spool: Option<Spool>,
    ) -> Result<Planned> {
        let mut clock = StepClock::start();
        // The first planning of a query takes the handshake started when it was asked for.
        let early = match attempt {
            1 => req.early_handshake.as_ref().and_then(|h| h.take()),
            _ => None,
        };
        let (resolved, early) = match early {
            Some((urls, answers)) => (urls, Some(answers)),
            None => (self.urls()?, None),
        };
        register_all(&self.runtime_env, &req.stores)?;
        let progress = req.progress.clone();
        let watched = progress.is_some() && !req.live_interval.is_zero();
        let log = Arc::new(TaskLog::with_progress(progress, attempt));
        if watched {
            watch(&log, Arc::clone(&self.observer), req.live_interval);
        }
        let state_for = |urls: &[Url], options: &HashMap<String, String>, log: &Arc<TaskLog>| {
            self.session_state(urls.to_vec(), options, req.codec.clone(), log)
        };
        // The plan is decoded while the workers answer the handshake: decoding does not
        // depend on which of them are usable, and the answers take longer than both.
        let decode = async {
            let started = std::time::Instant::now();
            let state = state_for(&resolved, &req.options, &log)?;
            let task_ctx = state.task_ctx();
            let session = started.elapsed();
            let plan = decode_plan(req, &task_ctx)?;
            Ok::<_, DataFusionError>((state, task_ctx, plan, session, started.elapsed() - session))
        };
        let ((urls, functions), decoded): ((Vec<Url>, Vec<Functions>), _) = match &self.cluster {
            Cluster::Remote(_, channels, quarantine) => {
                let handshake = async {
                    match early {
                        Some(answers) => answers_of(answers).await,
                        None => {
                            usable_workers(channels, &resolved, quarantine, req.min_workers).await
                        }
                    }
                };
                let (usable, decoded) = futures::join!(handshake, decode);
                (usable?.into_iter().unzip(), decoded)
            }
            Cluster::Embedded(_) => ((resolved.clone(), Vec::new()), decode.await),
        };
        let (mut state, task_ctx, mut plan, session, decoding) = decoded?;
        // The handshake's share: what the decoding, done meanwhile, did not hide.
        clock.record(
            "workers",
            clock.elapsed().saturating_sub(session + decoding),
        );
        clock.restart();
        clock.record("session", session);
        clock.record("decode", decoding);
        let workers = urls.len();
        // A spooling scan's runs split each stage alike, however many workers are left. A
        // write is not spooled: a task read back from the spool would not write its rows
        // again, and a run's staged commit takes only what that run wrote.
        let spool = match (&req.spool_dir, req.role) {
            (Some(dir), Role::Query) if !req.writes => Some(
                spool
                    .unwrap_or_else(|| Spool::new(dir.clone(), spool_tasks(&req.options, workers))),
            ),
            _ => None,
        };
        let mut options = req.options.clone();
        if let Some(spool) = &spool {
            let tasks = spool.tasks_per_stage.to_string();
            options.insert("distributed.max_tasks_per_stage".into(), tasks);
        }
        let shared = match req.role {
            Role::Query | Role::Keep { .. } if spool.is_none() => {
                shared_workers(&options, &urls, attempt)
            }
            _ => None,
        };
        if let Some((tasks, note)) = &shared {
            options.insert(MAX_TASKS.into(), tasks.to_string());
            log.set_sizing(note.clone());
        }
        if urls != resolved || spool.is_some() || shared.is_some() {
            state = state_for(&urls, &options, &log)?; // planned for the workers it runs on
        }
        let mut sources = Sources::default();
        if req.role != Role::Internal {
            let at = kept::Planning {
                workers: &urls,
                planner: self as *const Self as usize,
                embedded: self.is_embedded(),
            };
            let (resolved, kept_reads) = kept::resolve(plan, at).await?;
            plan = resolved;
            sources = Sources::of(&plan, kept_reads);
        }
        clock.lap("kept tables");
        check_functions(&req.codec.by_name(), &urls, &functions)?;
        plan = plan_rewrites::restore_compression(plan, &req.compressed_tables)?;
        plan = repair_decoded(plan)?;
        plan = restore_window_filters(plan, &req.window_filters, &task_ctx).map_err(|e| {
            not_distributable(format!(
                "a window's FILTER cannot be planned for workers ({})",
                e.to_string().lines().next().unwrap_or_default()
            ))
        })?;
        checks::check_nothing_lost(&plan)?;
        if !self.is_embedded() {
            checks::check_flight_types(&plan)?;
        }
        let stats = StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new())?;
        let exact_rows = match stats.num_rows {
            Precision::Exact(n) => Some(n),
            _ => None,
        };
        clock.lap("checks");
        let mut headers = http::HeaderMap::new();
        if matches!(self.cluster, Cluster::Remote(..)) {
            headers = stores_to_headers(&req.stores);
            headers.extend(window_function_headers(&plan, &*req.codec)?);
        }
        pass_headers(&mut state, &headers)?;
        // What runs while planning (scalar subqueries, build sides of joins) is our own work:
        // its tasks are kept apart from the query's (its progress, metrics, explain).
        let own_work_state = || {
            let log = Arc::new(TaskLog::with_progress(None, attempt));
            let mut own = state_for(&urls, &options, &log)?;
            pass_headers(&mut own, &headers)?;
            Ok::<_, DataFusionError>(own)
        };
        if subqueries::holds_subqueries(&plan) {
            let sub_state = own_work_state()?;
            let codec = &*req.codec;
            plan = subqueries::run_first(plan, &sub_state, codec)
                .await
                .map_err(failed_first("a scalar subquery"))?;
        }
        clock.lap("subqueries");
        let mut adaptive = Adaptive::from_options(&req.options)?;
        // A collected join is only correct across tasks when its build side is broadcast.
        let broadcasts =
            datafusion_distributed::DistributedConfig::from_config_options(state.config_options())?
                .broadcast_joins;
        adaptive.on &= broadcasts;
        if req.role != Role::Internal && adaptive_joins::worth_it(&plan, adaptive)? {
            let run_state = own_work_state()?;
            let (adapted, decisions) =
                adaptive_joins::plan_joins(plan, &run_state, adaptive, req.stall_timeout, workers)
                    .await
                    .map_err(failed_first("a join's build side"))?;
            plan = adapted;
            log.set_decisions(decisions.iter().map(|d| d.to_string()).collect());
        }
        clock.lap("adaptive joins");
        let mut plan = plan_rewrites::prepare(plan, state.config_options())?;
        // A write left on the coordinator (one file, an overwrite, an ordered merge) puts
        // files in place as it goes: a second run could add its rows twice.
        let repeatable = !req.writes || plan.downcast_ref::<SumCounts>().is_some();
        let mut kept_schema = None;
        if let Role::Keep { table, task_base } = req.role {
            kept_schema = Some(plan.schema());
            let target = req.keep_as.clone();
            if let Some(target) = &target {
                target.logically_equivalent_names_and_types(&plan.schema())?;
            }
            plan = kept::keep_on_workers(plan, table, task_base, urls.clone(), target);
        }
        clock.lap("rewrites");
        let (mut plan, task_ctx) = distribute_plan(plan, state).await?;
        clock.lap("stages");
        if !self.is_embedded() {
            plan = plan_rewrites::carry_large_lists(plan)?;
        }
        if let Some(spool) = &spool {
            plan = crate::spool::spool_stages(plan, &spool.scan_dir())?;
        }
        Ok(Planned {
            plan,
            task_ctx,
            log,
            workers: resolved,
            exact_rows,
            kept_schema,
            sources,
            repeatable,
            spool,
            clock,
        })
    }

    /// `base`'s options with `options` applied (see `apply_options`); the same as the latest
    /// query's when its options were the same.
    fn options_applied(&self, options: &HashMap<String, String>) -> Result<ConfigOptions> {
        let mut applied = self.applied.lock().expect("poisoned");
        if let Some((_, done)) = applied.as_ref().filter(|(same, _)| same == options) {
            return Ok(ConfigOptions::clone(done));
        }
        let mut cfg = self.base.config().clone();
        apply_options(&mut cfg, options)?;
        let done = Arc::clone(cfg.options());
        *applied = Some((options.clone(), Arc::clone(&done)));
        Ok(ConfigOptions::clone(&done))
    }

    fn session_state(
        &self,
        urls: Vec<Url>,
        options: &HashMap<String, String>,
        codec: Arc<dyn PhysicalExtensionCodec>,
        log: &Arc<TaskLog>,
    ) -> Result<SessionState> {
        let mut cfg = self.base.config().clone();
        *cfg.options_mut() = self.options_applied(options)?;
        cfg.set_distributed_worker_resolver(FixedResolver(urls.clone()));
        let fragments = Arc::new(fragment_codec(Arc::clone(&codec)));
        let (inner, transport): (Arc<dyn ChannelResolver + Send + Sync>, _) = match &self.cluster {
            Cluster::Embedded(c) => (Arc::new(c.channels.clone()), Transport::Embedded),
            Cluster::Remote(_, channels, _) => (
                Arc::new(channels.clone()),
                Transport::Remote {
                    max_message_bytes: channels.max_message_bytes(),
                },
            ),
        };
        cfg.set_distributed_channel_resolver(TrackingChannels {
            inner,
            log: Arc::clone(log),
            codec: fragments,
            transport,
        });
        // The session codec also decodes what workers send back (e.g. partitioning).
        cfg.set_distributed_user_codec_arc(codec);
        cfg.set_distributed_desired_task_count_handler(scan_tasks::desired_task_count);
        cfg.set_distributed_scale_up_leaf_node_handler(scan_tasks::scale_up);
        cfg.set_distributed_route_tasks_handler(kept::route_tasks);
        let embedded = matches!(self.cluster, Cluster::Embedded(_));
        settle_compression(&mut cfg, &urls, embedded);
        let mut state = self.base.clone();
        *state.config_mut() = cfg;
        Ok(state)
    }
}

/// The request's physical plan, decoded with `task_ctx`'s functions. What cannot be decoded
/// lost something in serialisation (a Float16 literal turned Float32, an operator with no
/// serialised form): the query runs single-node instead.
fn decode_plan(req: &PlanRequest, task_ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    match &req.plan {
        Some(plan) => Ok(Arc::clone(plan)),
        None => {
            physical_plan_from_bytes_with_extension_codec(&req.plan_bytes, task_ctx, &*req.codec)
                .map_err(|e| {
                    not_distributable(format!(
                        "its plan does not survive DataFusion 55's plan serialisation ({})",
                        e.to_string().lines().next().unwrap_or_default()
                    ))
                })
        }
    }
}

/// The tasks per stage of a spooling scan: the user's `max_tasks_per_stage`, or one per worker
/// of its first run (as without spooling), kept for its runs again on fewer workers. A leaf
/// task spools in chunks (`spool::chunks`), so a lost worker costs about a chunk of each of
/// its tasks, not the tasks.
const MAX_TASKS: &str = "distributed.max_tasks_per_stage";

/// The tasks per stage of a query planned over `urls` while other queries of this process are
/// read on them (see `load`), and why; None when it runs alone or its tasks per stage were set.
fn shared_workers(
    options: &HashMap<String, String>,
    urls: &[Url],
    attempt: usize,
) -> Option<(usize, String)> {
    if options.get(MAX_TASKS).is_some_and(|v| v.trim() != "0") {
        return None;
    }
    // A run after a lost worker is read by the same reader, counted already.
    let others = load::running_on(urls).saturating_sub(usize::from(attempt > 1));
    let tasks = load::tasks_per_stage(urls.len(), others)?;
    let queries = if others == 1 {
        "query was"
    } else {
        "queries were"
    };
    (tasks < urls.len()).then(|| {
        let note = format!(
            "at most {tasks} task(s) per stage: {others} other {queries} running on these {} \
             workers",
            urls.len()
        );
        (tasks, note)
    })
}

fn spool_tasks(options: &HashMap<String, String>, workers: usize) -> usize {
    let set = options
        .get("distributed.max_tasks_per_stage")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    match set {
        0 => workers.max(1),
        n => n,
    }
}

/// Every function the plan names that travels by name (an extension package's) is registered
/// on every worker: one that lacks it would fail mid-query, so the query does not start there.
fn check_functions(
    by_name: &[(&str, String)],
    urls: &[Url],
    functions: &[Functions],
) -> Result<()> {
    for (url, theirs) in urls.iter().zip(functions) {
        if let Some((kind, name)) = by_name.iter().find(|(_, n)| !theirs.contains(n)) {
            return Err(not_distributable(format!(
                "its {kind} function {name:?} is not registered on worker {}; register it \
                 there in the worker's setup: LocalCluster(functions=[\"<package>\"]), \
                 `datafusion-distributed-worker --functions <package>`, or a setup function \
                 that registers it",
                display_url(url)
            )));
        }
    }
    Ok(())
}

/// The query's own error in `what` (run first, while planning) as the reason to run the query
/// single-node, where it fails the same way when it runs; the workers' failures stay as they
/// are.
fn failed_first(what: &'static str) -> impl Fn(DataFusionError) -> DataFusionError {
    move |e| {
        if is_worker_failure(&e)
            || is_rejected_credentials(&e)
            || as_not_distributable(&e).is_some()
        {
            return e;
        }
        not_distributable(format!(
            "{what} fails when run first ({})",
            e.to_string().lines().next().unwrap_or_default()
        ))
    }
}

/// Sends `headers` (object stores, window functions) with every task planned with `state`.
fn pass_headers(state: &mut SessionState, headers: &http::HeaderMap) -> Result<()> {
    match headers.is_empty() {
        true => Ok(()),
        false => state
            .config_mut()
            .set_distributed_passthrough_headers(headers.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch_size(planner: &ClusterPlanner, n: &str) -> Result<usize> {
        let key = "datafusion.execution.batch_size".to_string();
        let options = HashMap::from([(key, n.to_string())]);
        Ok(planner
            .options_applied(&options)?
            .execution
            .batch_size
            .into())
    }

    #[tokio::test]
    async fn a_change_of_options_is_applied_and_the_same_ones_reused() {
        let planner = ClusterPlanner::remote(Workers::Static(vec![]), Security::default());
        assert_eq!(batch_size(&planner, "100").unwrap(), 100);
        assert_eq!(batch_size(&planner, "100").unwrap(), 100);
        assert_eq!(batch_size(&planner, "200").unwrap(), 200);
        assert_eq!(batch_size(&planner, "100").unwrap(), 100);
        let bad = HashMap::from([("distributed.no_such".to_string(), "1".to_string())]);
        for _ in 0..2 {
            let err = planner.options_applied(&bad).unwrap_err().to_string();
            assert!(err.contains("distributed.no_such"), "{err}");
        }
    }
}
