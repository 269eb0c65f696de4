//! The embedded cluster: N datafusion-distributed `Worker`s living in this process.
//!
//! Stages still run as separate tasks on separate workers with network boundaries between
//! them; only the transport is replaced: a `WorkerChannel` that calls the worker directly, so
//! plans stay decoded and batches stay in memory.
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, DistributedExt, ExecuteTaskRequest,
    GetWorkerInfoRequest, GetWorkerInfoResponse, SetPlanRequest, Worker, WorkerChannel,
    WorkerQueryContext, WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use futures::StreamExt;
use http::HeaderMap;
use url::Url;

use crate::task_cache;

/// Routes a worker URL to the in-process `Worker` that owns it.
#[derive(Clone, Default)]
pub struct InProcessChannelResolver {
    workers: Arc<HashMap<Url, Worker>>,
}

#[async_trait]
impl ChannelResolver for InProcessChannelResolver {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let worker = self
            .workers
            .get(url)
            .ok_or_else(|| exec_datafusion_err!("no embedded worker at {url}"))?;
        Ok(Box::new(InProcessChannel(worker.clone())))
    }
}

struct InProcessChannel(Worker);

#[async_trait]
impl WorkerChannel for InProcessChannel {
    async fn coordinator_channel(
        &mut self,
        headers: HeaderMap,
        set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        _metrics: ExecutionPlanMetricsSet,
        _task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        self.0
            .coordinator_channel(headers, set_plan_request, c2w_stream.map(Ok).boxed())
            .await
    }

    async fn execute_task(
        &mut self,
        _headers: HeaderMap,
        request: ExecuteTaskRequest,
        _metrics: ExecutionPlanMetricsSet,
        _task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        let (streams, _) = self.0.execute_task(request).await?;
        Ok(streams.into_iter().map(|s| s.boxed()).collect())
    }

    async fn get_worker_info(
        &mut self,
        _request: GetWorkerInfoRequest,
    ) -> Result<GetWorkerInfoResponse> {
        Ok(GetWorkerInfoResponse {
            version: self.0.version().to_string(),
        })
    }
}

/// An in-process cluster: its worker URLs and the resolver that reaches them.
pub struct EmbeddedCluster {
    pub urls: Vec<Url>,
    pub channels: InProcessChannelResolver,
    _sweepers: Vec<SpawnedTask<()>>,
}

impl EmbeddedCluster {
    pub fn start(n_workers: usize, runtime_env: Arc<RuntimeEnv>, version: &str) -> Self {
        let urls: Vec<Url> = (0..n_workers)
            .map(|i| Url::parse(&format!("embedded://worker-{i}")).expect("static URL"))
            .collect();
        // Workers must reach each other (a shuffle reads from every task of the stage below),
        // so each worker's session carries the same resolver; it is filled in after the
        // workers exist, hence the shared cell.
        let cell: Arc<std::sync::OnceLock<InProcessChannelResolver>> = Default::default();
        let mut workers = HashMap::new();
        for url in &urls {
            let cell = Arc::clone(&cell);
            let worker = Worker::from_session_builder(move |qctx: WorkerQueryContext| {
                let channels = cell.get().cloned().unwrap_or_default();
                async move {
                    Ok(qctx
                        .builder
                        .with_distributed_channel_resolver(channels)
                        .build())
                }
            })
            .with_runtime_env(Arc::clone(&runtime_env))
            .with_version(version.to_string());
            workers.insert(url.clone(), worker);
        }
        let channels = InProcessChannelResolver {
            workers: Arc::new(workers),
        };
        let _ = cell.set(channels.clone());
        let sweepers = channels
            .workers
            .values()
            .cloned()
            .map(task_cache::sweep)
            .collect();
        Self {
            urls,
            channels,
            _sweepers: sweepers,
        }
    }
}
