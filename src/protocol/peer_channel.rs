//! A worker's channel to another worker (shuffles, broadcasts), whose failures are reported
//! as the loss of that peer in a form that reaches the coordinator intact
//! ([`crate::errors::as_lost_peer`]).
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_distributed::{
    CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest, GetWorkerInfoResponse,
    SetPlanRequest, WorkerChannel, WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use http::HeaderMap;

use crate::errors::as_lost_peer;

pub struct PeerChannel {
    pub peer: String,
    pub inner: Box<dyn WorkerChannel>,
}

fn lost<T: Send + 'static>(
    peer: &str,
    stream: BoxStream<'static, Result<T>>,
) -> BoxStream<'static, Result<T>> {
    let peer = peer.to_string();
    stream.map_err(move |e| as_lost_peer(&peer, e)).boxed()
}

#[async_trait]
impl WorkerChannel for PeerChannel {
    async fn coordinator_channel(
        &mut self,
        headers: HeaderMap,
        set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        let stream = self
            .inner
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
            .map_err(|e| as_lost_peer(&self.peer, e))?;
        Ok(lost(&self.peer, stream))
    }

    async fn execute_task(
        &mut self,
        headers: HeaderMap,
        request: ExecuteTaskRequest,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        let streams = self
            .inner
            .execute_task(headers, request, metrics, task_ctx)
            .await
            .map_err(|e| as_lost_peer(&self.peer, e))?;
        Ok(streams.into_iter().map(|s| lost(&self.peer, s)).collect())
    }

    async fn get_worker_info(
        &mut self,
        request: GetWorkerInfoRequest,
    ) -> Result<GetWorkerInfoResponse> {
        self.inner
            .get_worker_info(request)
            .await
            .map_err(|e| as_lost_peer(&self.peer, e))
    }
}
