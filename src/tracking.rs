//! Where each task ran: a `ChannelResolver` wrapper that records every task the coordinator
//! sends (stage, task, worker URL) and names the worker in errors coming back from it.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest,
    GetWorkerInfoResponse, MaybeEncoded, SetPlanRequest, TaskMetrics, WorkerChannel,
    WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use http::HeaderMap;
use pyo3::prelude::*;
use url::Url;

use crate::codec::{decode_fragment, encode_fragment, FragmentCodec};
use crate::errors::{is_worker_failure, worker_failure};
use crate::resolver::display_url;

/// One task of one stage: where it ran and, once it finished, what it did.
#[derive(Clone, Debug)]
pub struct TaskRecord {
    pub stage: usize,
    pub task: usize,
    pub task_count: usize,
    pub url: Url,
    pub sent_at: Instant,
    pub finished_at: Option<Instant>,
    pub output_rows: Option<usize>,
    pub output_bytes: Option<usize>,
    pub elapsed_compute_ns: Option<usize>,
}

/// The tasks of one run of a query, in the order they were sent, and an optional Python
/// progress callback `(stage, done, total, worker_url)`.
#[derive(Default)]
pub struct TaskLog {
    records: Mutex<Vec<TaskRecord>>,
    progress: Option<Py<PyAny>>,
    /// Held from counting to calling back, so the callback sees `done` only grow. Never taken
    /// with the GIL held (tasks report from runtime threads), so it cannot deadlock with it.
    reporting: Mutex<()>,
}

impl std::fmt::Debug for TaskLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskLog").finish_non_exhaustive()
    }
}

impl TaskLog {
    pub fn with_progress(progress: Option<Py<PyAny>>) -> Self {
        Self {
            records: Mutex::default(),
            progress,
            reporting: Mutex::default(),
        }
    }

    pub fn records(&self) -> Vec<TaskRecord> {
        self.records.lock().expect("poisoned").clone()
    }

    fn sent(&self, record: TaskRecord) {
        let (stage, total, url) = (record.stage, record.task_count, record.url.clone());
        let _in_order = self.reporting.lock().expect("poisoned");
        let done = {
            let mut records = self.records.lock().expect("poisoned");
            records.push(record);
            count_done(&records, stage)
        };
        self.report(stage, done, total, &url);
    }

    fn finished(&self, stage: usize, task: usize, metrics: &TaskMetrics) {
        let _in_order = self.reporting.lock().expect("poisoned");
        let reported = {
            let mut records = self.records.lock().expect("poisoned");
            let Some(r) = records
                .iter_mut()
                .find(|r| r.stage == stage && r.task == task && r.finished_at.is_none())
            else {
                return;
            };
            let root = metrics.pre_order_plan_metrics.first();
            r.finished_at = Some(Instant::now());
            r.output_rows = root.and_then(|m| m.output_rows());
            r.output_bytes = root.map(|m| {
                m.iter()
                    .filter(|x| x.value().name() == "output_bytes")
                    .map(|x| x.value().as_usize())
                    .sum()
            });
            r.elapsed_compute_ns = Some(
                metrics
                    .pre_order_plan_metrics
                    .iter()
                    .filter_map(|m| m.elapsed_compute())
                    .sum(),
            );
            let (total, url) = (r.task_count, r.url.clone());
            (count_done(&records, stage), total, url)
        };
        self.report(stage, reported.0, reported.1, &reported.2);
    }

    fn report(&self, stage: usize, done: usize, total: usize, url: &Url) {
        if let Some(callback) = &self.progress {
            Python::attach(|py| {
                if let Err(e) = callback.call1(py, (stage, done, total, display_url(url))) {
                    log::warn!("progress callback failed: {e}");
                }
            });
        }
    }

    /// `Stage N: t0=url, t1=url` lines, stages in order.
    pub fn render(&self) -> String {
        let mut by_stage: BTreeMap<usize, Vec<TaskRecord>> = BTreeMap::new();
        for r in self.records() {
            by_stage.entry(r.stage).or_default().push(r);
        }
        let mut out = String::new();
        for (stage, mut tasks) in by_stage {
            tasks.sort_by_key(|r| r.task);
            let list: Vec<String> = tasks
                .iter()
                .map(|r| format!("t{}={}", r.task, display_url(&r.url)))
                .collect();
            out.push_str(&format!("Stage {stage}: {}\n", list.join(", ")));
        }
        out
    }
}

fn count_done(records: &[TaskRecord], stage: usize) -> usize {
    records
        .iter()
        .filter(|r| r.stage == stage && r.finished_at.is_some())
        .count()
}

/// How a plan fragment reaches a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// In this process: the fragment is still decoded into a private copy, because tasks of
    /// one stage share plan nodes (join state, dynamic filters, stream pools) and must not.
    Embedded,
    /// Over gRPC: the fragment is sent encoded.
    Remote,
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
    if is_worker_failure(&e) {
        return e;
    }
    worker_failure(format!("worker {} failed: {e}", display_url(url)))
}

impl TrackingChannel {
    /// The plan fragment as this transport sends it.
    fn fragment(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        task_ctx: &TaskContext,
    ) -> Result<MaybeEncoded<Arc<dyn ExecutionPlan>>> {
        let bytes = encode_fragment(plan, &self.codec)?;
        Ok(match self.transport {
            Transport::Embedded => {
                MaybeEncoded::Decoded(decode_fragment(&bytes, task_ctx, &self.codec)?)
            }
            Transport::Remote => MaybeEncoded::Encoded(bytes),
        })
    }
}

#[async_trait]
impl WorkerChannel for TrackingChannel {
    async fn coordinator_channel(
        &mut self,
        headers: HeaderMap,
        mut set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        if let MaybeEncoded::Decoded(plan) = set_plan_request.plan {
            set_plan_request.plan = self.fragment(plan, task_ctx).map_err(|e| {
                // The coordinator reports the first failing task's error only after others
                // time out waiting for this plan: say it now.
                log::error!(
                    "cannot send stage plan to worker {}: {e}",
                    display_url(&self.url)
                );
                e
            })?;
        }
        let (stage, task) = (
            set_plan_request.task_key.stage_id,
            set_plan_request.task_key.task_number,
        );
        self.log.sent(TaskRecord {
            stage,
            task,
            task_count: set_plan_request.task_count,
            url: self.url.clone(),
            sent_at: Instant::now(),
            finished_at: None,
            output_rows: None,
            output_bytes: None,
            elapsed_compute_ns: None,
        });
        let url = self.url.clone();
        let stream = self
            .inner
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
            .map_err(|e| name_worker(&url, e))?;
        let log = Arc::clone(&self.log);
        Ok(stream
            .inspect_ok(move |msg| {
                if let WorkerToCoordinatorMsg::TaskMetrics(m) = msg {
                    log.finished(stage, task, m);
                }
            })
            .map_err(move |e| name_worker(&url, e))
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
            .map_err(|e| name_worker(&url, e))?;
        Ok(streams
            .into_iter()
            .map(|s| {
                let url = url.clone();
                s.map_err(move |e| name_worker(&url, e)).boxed()
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
