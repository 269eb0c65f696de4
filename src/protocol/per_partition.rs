//! One gRPC stream per partition read from a task, so that no partition waits behind another.
//!
//! The crate's gRPC client reads a range of a task's partitions over one stream and stops
//! pulling it once `worker_connection_buffer_budget_bytes` of batches wait unread. A reader
//! that needs a batch of *every* partition before it goes on (a sort-preserving merge, a join
//! reading its build side) then waits forever when the unread batches all belong to other
//! partitions while the one it waits for is behind them — a sort that spilled produces its
//! partitions at different times, so this is how a sort under a memory limit hung. Asking
//! for each partition on a stream of its own keeps the budget (each stream stops at it) and
//! makes that wait impossible: a partition's stream holds only its own batches. The budget is
//! shared out between a task's partition streams, so the reader holds no more than before.
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_distributed::DistributedConfig;
use datafusion_distributed::{
    CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest, GetWorkerInfoResponse,
    SetPlanRequest, WorkerChannel, WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use http::HeaderMap;

pub struct PerPartitionChannel(pub Box<dyn WorkerChannel>);

#[async_trait]
impl WorkerChannel for PerPartitionChannel {
    async fn coordinator_channel(
        &mut self,
        headers: HeaderMap,
        set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        self.0
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
    }

    async fn execute_task(
        &mut self,
        headers: HeaderMap,
        request: ExecuteTaskRequest,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        let range = request.target_partition_start..request.target_partition_end;
        if range.len() <= 1 {
            return self
                .0
                .execute_task(headers, request, metrics, task_ctx)
                .await;
        }
        let task_ctx = &with_shared_budget(task_ctx, range.len())?;
        // Each call returns at once: its stream is requested when first polled.
        let mut streams = Vec::with_capacity(range.len());
        for partition in range {
            let one = ExecuteTaskRequest {
                task_key: request.task_key,
                target_partition_start: partition,
                target_partition_end: partition + 1,
                producer_head: request.producer_head.clone(),
            };
            let call = self
                .0
                .execute_task(headers.clone(), one, metrics.clone(), task_ctx);
            streams.extend(call.await?);
        }
        Ok(streams)
    }

    async fn get_worker_info(
        &mut self,
        request: GetWorkerInfoRequest,
    ) -> Result<GetWorkerInfoResponse> {
        self.0.get_worker_info(request).await
    }
}

/// `ctx` with its worker connection buffer budget divided between `streams` streams.
fn with_shared_budget(ctx: &Arc<TaskContext>, streams: usize) -> Result<Arc<TaskContext>> {
    let budget = DistributedConfig::from_session_config(ctx.session_config())?
        .worker_connection_buffer_budget_bytes;
    let mut config = ctx.session_config().clone();
    config.options_mut().set(
        "distributed.worker_connection_buffer_budget_bytes",
        &(budget / streams).max(1).to_string(),
    )?;
    Ok(Arc::new(TaskContext::new(
        ctx.task_id(),
        ctx.session_id(),
        config,
        ctx.scalar_functions().clone(),
        ctx.higher_order_functions().clone(),
        ctx.aggregate_functions().clone(),
        ctx.window_functions().clone(),
        ctx.runtime_env(),
    )))
}
