//! Channels to workers living in this process (the embedded cluster): the `WorkerChannel` calls
//! the worker directly, so plans stay decoded and batches stay in memory.
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest,
    GetWorkerInfoResponse, SetPlanRequest, Worker, WorkerChannel, WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use futures::StreamExt;
use http::HeaderMap;
use url::Url;

/// Workers living in this process (the embedded cluster, which `worker/` starts), as the
/// coordinator sees them: their URLs and the channels that call them.
pub struct InProcessWorkers {
    pub urls: Vec<Url>,
    pub channels: InProcessChannelResolver,
    /// What keeps the workers serving (their housekeeping), dropped with the planner.
    pub keep_alive: Box<dyn std::any::Any + Send + Sync>,
}

/// Routes a worker URL to the in-process `Worker` that owns it.
#[derive(Clone, Default)]
pub struct InProcessChannelResolver {
    workers: Arc<HashMap<Url, Worker>>,
}

impl InProcessChannelResolver {
    pub fn new(workers: HashMap<Url, Worker>) -> Self {
        Self {
            workers: Arc::new(workers),
        }
    }

    pub fn workers(&self) -> impl Iterator<Item = &Worker> {
        self.workers.values()
    }

    pub fn by_url(&self) -> &HashMap<Url, Worker> {
        &self.workers
    }
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

    // Only the request matters in-process: no headers to send, metrics and context are shared.
    async fn execute_task(
        &mut self,
        _: http::HeaderMap,
        request: ExecuteTaskRequest,
        _: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
        _: &Arc<TaskContext>,
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
