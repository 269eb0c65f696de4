//! The embedded cluster: N datafusion-distributed `Worker`s living in this process.
//!
//! Stages still run as separate tasks on separate workers with network boundaries between
//! them; only the transport is in-process (see `protocol::in_process`).
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use datafusion::common::runtime::SpawnedTask;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use url::Url;

use super::sessions::TaskSessions;
use super::task_cache;
use crate::protocol::task_headers::{TaskKey, TaskTrace};
use crate::protocol::{InProcessChannelResolver, InProcessWorkers};

/// An in-process cluster of `n_workers` on `runtime_env`: their URLs, the resolver that
/// reaches them, and the sweepers of their task caches.
pub struct EmbeddedCluster;

impl EmbeddedCluster {
    pub fn start(
        n_workers: usize,
        runtime_env: Arc<RuntimeEnv>,
        version: &str,
    ) -> InProcessWorkers {
        let urls: Vec<Url> = (0..n_workers)
            .map(|i| Url::parse(&format!("embedded://worker-{i}")).expect("static URL"))
            .collect();
        // Workers must reach each other (a shuffle reads from every task of the stage below),
        // so each worker's session carries the same resolver; it is filled in after the
        // workers exist, hence the shared cell.
        let cell: Arc<OnceLock<InProcessChannelResolver>> = Default::default();
        let sessions = Arc::new(TaskSessions::default());
        let mut workers = HashMap::new();
        for url in &urls {
            let cell = Arc::clone(&cell);
            let sessions = Arc::clone(&sessions);
            let worker = Worker::from_session_builder(move |qctx: WorkerQueryContext| {
                let channels = cell.get().cloned().unwrap_or_default();
                let mut state = sessions.session(qctx.builder);
                let config = state.config_mut();
                config.set_distributed_channel_resolver(channels);
                if let Some(trace) = TaskTrace::from_headers(&qctx.headers) {
                    config.set_extension(Arc::new(trace));
                }
                if let Some(key) = TaskKey::from_headers(&qctx.headers) {
                    config.set_extension(Arc::new(key));
                }
                async move { Ok(state) }
            })
            .with_runtime_env(Arc::clone(&runtime_env))
            .with_version(version.to_string());
            workers.insert(url.clone(), worker);
        }
        let channels = InProcessChannelResolver::new(workers);
        let _ = cell.set(channels.clone());
        let sweepers: Vec<SpawnedTask<()>> =
            channels.workers().cloned().map(task_cache::sweep).collect();
        InProcessWorkers {
            urls,
            channels,
            keep_alive: Box::new(sweepers),
        }
    }
}
