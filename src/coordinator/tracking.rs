//! A `ChannelResolver` wrapper the coordinator sends tasks through: it encodes each stage's
//! fragment with our fragment codec, records every task in the `TaskLog`, and names the worker
//! in any error coming back from it.
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest,
    GetWorkerInfoResponse, MaybeEncoded, SetPlanRequest, WorkerChannel, WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use http::HeaderMap;
use url::Url;

use super::task_log::{TaskLog, TaskRecord};
use crate::codec::{
    copy_fragment, encode_fragment, mark_for_repair, wrap_compressed_scans, FragmentCodec,
};
use crate::errors;
use crate::protocol::display_url;
use crate::protocol::task_headers::TaskKey;

/// How a plan fragment reaches a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// In this process: the fragment is still decoded into a private copy, because tasks of
    /// one stage share plan nodes (join state, dynamic filters, stream pools) and must not.
    Embedded,
    /// Over gRPC: the fragment is sent encoded, and must fit in a message of this many bytes
    /// (workers refuse larger ones; saying so here names the cause instead of a timeout).
    Remote { max_message_bytes: usize },
}

pub struct TrackingChannels<C> {
    pub inner: C,
    pub log: Arc<TaskLog>,
    pub codec: Arc<FragmentCodec>,
    pub transport: Transport,
}

#[async_trait]
impl<C: ChannelResolver + Send + Sync> ChannelResolver for TrackingChannels<C> {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let inner = self
            .inner
            .get_worker_client_for_url(url)
            .await
            .map_err(|e| name_worker(url, e))?;
        Ok(Box::new(TrackingChannel {
            inner,
            url: url.clone(),
            log: Arc::clone(&self.log),
            codec: Arc::clone(&self.codec),
            transport: self.transport,
        }))
    }
}

struct TrackingChannel {
    inner: Box<dyn WorkerChannel>,
    url: Url,
    log: Arc<TaskLog>,
    codec: Arc<FragmentCodec>,
    transport: Transport,
}

/// Wraps an error from a worker so that the message names it (once).
fn name_worker(url: &Url, e: DataFusionError) -> DataFusionError {
    errors::name_worker(display_url(url), e)
}

/// An error of a task of this run: when a stage's plan could not be sent, every task waiting
/// for it fails later with a timeout; the reason the plan was not sent is what to report.
fn task_error(log: &TaskLog, url: &Url, e: DataFusionError) -> DataFusionError {
    match log.unsent_plan() {
        Some(why) => DataFusionError::Execution(why),
        None => name_worker(url, e),
    }
}

impl TrackingChannel {
    /// The plan fragment as this transport sends it.
    fn fragment(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        task_ctx: &TaskContext,
    ) -> Result<MaybeEncoded<Arc<dyn ExecutionPlan>>> {
        let plan = mark_for_repair(wrap_compressed_scans(plan)?);
        let max_message_bytes = match self.transport {
            Transport::Embedded => {
                let (copy, bytes) = copy_fragment(&plan, task_ctx, &self.codec)?;
                self.log.sent_plan_bytes(bytes);
                return Ok(MaybeEncoded::Decoded(copy));
            }
            Transport::Remote { max_message_bytes } => max_message_bytes,
        };
        let bytes = encode_fragment(plan, &self.codec)?;
        if bytes.len() > max_message_bytes {
            return Err(DataFusionError::ResourcesExhausted(format!(
                "a plan fragment for worker {} is {} bytes, over the {max_message_bytes}-byte \
                 message limit (Security(max_message_bytes=...)); in-memory tables travel \
                 inside plans: write large ones to Parquet and register the files",
                display_url(&self.url),
                bytes.len()
            )));
        }
        self.log.sent_plan_bytes(bytes.len());
        Ok(MaybeEncoded::Encoded(bytes))
    }
}

#[async_trait]
impl WorkerChannel for TrackingChannel {
    async fn coordinator_channel(
        &mut self,
        mut headers: HeaderMap,
        mut set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        if let MaybeEncoded::Decoded(plan) = set_plan_request.plan {
            set_plan_request.plan = self.fragment(plan, task_ctx).map_err(|e| {
                // The coordinator reports the first failing task's error only after others
                // time out waiting for this plan: say it now, and keep it as the cause.
                let why = format!(
                    "cannot send stage plan to worker {}: {e}",
                    display_url(&self.url)
                );
                log::error!("{why}");
                self.log.plan_not_sent(why);
                e
            })?;
        }
        if let Some(trace) = self.log.trace() {
            trace.add_to(&mut headers);
        }
        let key = &set_plan_request.task_key;
        TaskKey {
            query_id: key.query_id.to_string(),
            stage: key.stage_id,
            task: key.task_number,
            tasks: set_plan_request.task_count,
        }
        .add_to(&mut headers);
        let (stage, task) = (
            set_plan_request.task_key.stage_id,
            set_plan_request.task_key.task_number,
        );
        self.log.sent(TaskRecord {
            query_id: set_plan_request.task_key.query_id,
            stage,
            task,
            task_count: set_plan_request.task_count,
            url: self.url.clone(),
            sent_at: Instant::now(),
            finished_at: None,
            output_rows: None,
            output_bytes: None,
            elapsed_compute_ns: None,
            spill_count: None,
            spilled_bytes: None,
            worker_span: None,
        });
        let url = self.url.clone();
        let stream = self
            .inner
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
            .map_err(|e| name_worker(&url, e))?;
        let (log, errors) = (Arc::clone(&self.log), Arc::clone(&self.log));
        Ok(stream
            .inspect_ok(move |msg| {
                if let WorkerToCoordinatorMsg::TaskMetrics(m) = msg {
                    log.finished(stage, task, m);
                }
            })
            .map_err(move |e| task_error(&errors, &url, e))
            .boxed())
    }

    async fn execute_task(
        &mut self,
        headers: HeaderMap,
        request: ExecuteTaskRequest,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        let url = self.url.clone();
        let streams = self
            .inner
            .execute_task(headers, request, metrics, task_ctx)
            .await
            .map_err(|e| task_error(&self.log, &url, e))?;
        Ok(streams
            .into_iter()
            .map(|s| {
                let (url, log) = (url.clone(), Arc::clone(&self.log));
                s.map_err(move |e| task_error(&log, &url, e)).boxed()
            })
            .collect())
    }

    async fn get_worker_info(
        &mut self,
        request: GetWorkerInfoRequest,
    ) -> Result<GetWorkerInfoResponse> {
        self.inner.get_worker_info(request).await
    }
}
