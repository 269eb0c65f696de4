//! Live progress: the rows running tasks have produced, and how each worker is doing, asked of
//! the workers' observability service (datafusion-distributed's `GetTaskProgress`).
//!
//! Task metrics reach the coordinator only when a task ends; a long stage would show nothing
//! until then. While a query runs, a watcher asks every worker of the run, every
//! `interval`, for its running tasks' output rows, keeps those of this query's tasks in the
//! run's `TaskLog`, and reports each stage whose rows moved to the progress callback.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use datafusion::common::{DataFusionError, Result};
use datafusion_distributed::grpc::{
    GetTaskProgressRequest, GetTaskProgressResponse, ObservabilityServiceClient,
    ObservabilityServiceImpl, ObservabilityServiceServer,
};
use datafusion_distributed::Worker;
use url::Url;
use uuid::Uuid;

use super::task_log::TaskLog;
use crate::protocol::{display_url, FixedResolver, WorkerChannels};

/// Asks in a row without a task of the run after which the watcher stops.
const IDLE_ASKS: usize = 3;

/// How long one worker may take to say how it is doing: a worker on a loaded machine (its
/// cores busy with tasks, a browser starting) can take seconds; one frozen is still named
/// down within this.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// A worker using more CPU than this (percent of the machine) is at work.
const BUSY_CPU_PERCENT: f64 = 1.0;

/// Whether a worker using `cpu_percent` of the machine is at work.
pub fn busy(cpu_percent: f64) -> bool {
    cpu_percent > BUSY_CPU_PERCENT
}

/// The running tasks of query `query_id` in a worker's answer: (stage, task) and output rows.
pub fn tasks_of<'a>(
    answer: &'a GetTaskProgressResponse,
    query_id: &'a Uuid,
) -> impl Iterator<Item = ((usize, usize), u64)> + 'a {
    answer.tasks.iter().filter_map(move |task| {
        let key = task.task_key.as_ref()?;
        (key.query_id.as_slice() == query_id.as_bytes()).then_some((
            (key.stage_id as usize, key.task_number as usize),
            task.output_rows,
        ))
    })
}

/// Asks workers how their tasks and they themselves are doing.
pub enum Observer {
    /// In-process workers: their services are called directly, made on first use.
    Embedded {
        workers: HashMap<Url, Worker>,
        services: Mutex<HashMap<Url, ObservabilityServiceServer<ObservabilityServiceImpl>>>,
    },
    /// Worker processes, over the query's own channels (with its token and TLS).
    Remote(WorkerChannels),
}

/// One worker as the dashboard and `status()` show it.
#[derive(Clone, Debug)]
pub struct WorkerStatus {
    pub url: String,
    /// Why the worker did not answer, if it did not.
    pub error: Option<String>,
    pub rss_bytes: u64,
    pub cpu_percent: f64,
    pub running_tasks: usize,
}

impl Observer {
    pub fn embedded(workers: HashMap<Url, Worker>) -> Self {
        Self::Embedded {
            workers,
            services: Mutex::default(),
        }
    }

    /// `url`'s running tasks (of every query) and its process's memory and CPU.
    pub async fn ask(&self, url: &Url) -> Result<GetTaskProgressResponse> {
        let failed = |e: String| {
            DataFusionError::Execution(format!("worker {} did not answer: {e}", display_url(url)))
        };
        let answer = match self {
            Self::Embedded { workers, services } => {
                let service = {
                    let mut services = services.lock().expect("poisoned");
                    match services.get(url) {
                        Some(s) => s.clone(),
                        None => {
                            let worker = workers
                                .get(url)
                                .ok_or_else(|| failed("no such embedded worker".into()))?;
                            let s = worker.with_observability_service(Arc::new(FixedResolver(
                                workers.keys().cloned().collect(),
                            )));
                            services.insert(url.clone(), s.clone());
                            s
                        }
                    }
                };
                let mut client = ObservabilityServiceClient::new(service);
                tokio::time::timeout(
                    ASK_TIMEOUT,
                    client.get_task_progress(GetTaskProgressRequest {}),
                )
                .await
            }
            Self::Remote(channels) => {
                let mut client = ObservabilityServiceClient::new(channels.authorized(url).await?);
                tokio::time::timeout(
                    ASK_TIMEOUT,
                    client.get_task_progress(GetTaskProgressRequest {}),
                )
                .await
            }
        };
        match answer {
            Err(_) => Err(failed(format!(
                "no answer within {} s",
                ASK_TIMEOUT.as_secs()
            ))),
            Ok(Err(status)) => Err(failed(status.message().to_string())),
            Ok(Ok(response)) => Ok(response.into_inner()),
        }
    }

    /// How each of `urls` is doing, asked in parallel.
    pub async fn status(&self, urls: &[Url]) -> Vec<WorkerStatus> {
        let answers = futures::future::join_all(urls.iter().map(|u| self.ask(u))).await;
        urls.iter()
            .zip(answers)
            .map(|(url, answer)| {
                let url = display_url(url).to_string();
                match answer {
                    Ok(a) => {
                        let m = a.worker_metrics.unwrap_or_default();
                        WorkerStatus {
                            url,
                            error: None,
                            rss_bytes: m.rss_bytes,
                            cpu_percent: m.cpu_usage_percent,
                            running_tasks: a.tasks.len(),
                        }
                    }
                    Err(e) => WorkerStatus {
                        url,
                        error: Some(e.to_string()),
                        rss_bytes: 0,
                        cpu_percent: 0.0,
                        running_tasks: 0,
                    },
                }
            })
            .collect()
    }
}

/// Watches the run `log` records, from its first task until its last one ends (or no worker
/// runs any of its tasks any more, or the log is dropped), asking its workers every
/// `interval` for their running tasks' rows.
pub fn watch(log: &Arc<TaskLog>, observer: Arc<Observer>, interval: Duration) {
    let weak: Weak<TaskLog> = Arc::downgrade(log);
    let started = log.started();
    crate::runtime::handle().spawn(async move {
        // A plan that never runs never starts: check now and then that it still exists.
        loop {
            tokio::select! {
                _ = started.notified() => break,
                _ = tokio::time::sleep(Duration::from_secs(5)) => {
                    if weak.strong_count() == 0 {
                        return;
                    }
                }
            }
        }
        let mut every = tokio::time::interval(interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: a short query never polls.
        every.tick().await;
        // Asks in a row that found no task of this run: a run that failed or was given up
        // leaves its records unfinished, and the watcher ends with it all the same.
        let mut idle = 0;
        loop {
            every.tick().await;
            let Some(log) = weak.upgrade() else { return };
            let (query_id, urls) = match log.running() {
                Some(running) => running,
                None => return,
            };
            let answers = futures::future::join_all(urls.iter().map(|u| observer.ask(u))).await;
            let rows: HashMap<(usize, usize), u64> = answers
                .iter()
                .flatten()
                .flat_map(|answer| tasks_of(answer, &query_id))
                .collect();
            idle = if rows.is_empty() { idle + 1 } else { 0 };
            if idle >= IDLE_ASKS {
                return;
            }
            log.live_rows(rows);
        }
    });
}
