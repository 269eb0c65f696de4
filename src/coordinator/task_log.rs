//! `TaskLog`: where each task of one run went and what it did, feeding explain, metrics and
//! progress callbacks.
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use datafusion_distributed::TaskMetrics;
use tokio::sync::Notify;
use url::Url;
use uuid::Uuid;

use crate::protocol::display_url;
use crate::protocol::task_headers::{read_span, TaskTrace, WorkerSpan};

/// One task of one stage: where it ran and, once it finished, what it did.
#[derive(Clone, Debug)]
pub struct TaskRecord {
    pub query_id: Uuid,
    pub stage: usize,
    pub task: usize,
    pub task_count: usize,
    pub url: Url,
    pub sent_at: Instant,
    pub finished_at: Option<Instant>,
    pub output_rows: Option<usize>,
    pub output_bytes: Option<usize>,
    pub elapsed_compute_ns: Option<usize>,
    /// Spill files written and bytes spilled by the task's operators (memory limit reached).
    pub spill_count: Option<usize>,
    pub spilled_bytes: Option<usize>,
    /// The task's span as its worker timed it, when the run was traced.
    pub worker_span: Option<WorkerSpan>,
}

/// One step of a run's progress, as a [`ProgressSink`] is told it.
#[derive(Debug, Clone, Copy)]
pub struct ProgressUpdate<'a> {
    pub stage: usize,
    /// Tasks of the stage done, of `total`.
    pub done: usize,
    pub total: usize,
    pub worker: &'a str,
    /// Which run of the query: 1, then 2... after retries.
    pub attempt: usize,
    /// `"task"` (a task sent or finished) or `"retry"` (the run failed; the query runs again).
    pub kind: &'a str,
    /// Rows the stage's tasks produced so far, and the estimated seconds left.
    pub rows: Option<u64>,
    pub eta_s: Option<f64>,
}

/// Where a run's progress goes (the user's Python callback, in `python/`).
pub trait ProgressSink: Send + Sync {
    fn update(&self, update: ProgressUpdate<'_>);
}

/// The tasks of one run of a query, in the order they were sent, and an optional progress
/// sink.
#[derive(Default)]
pub struct TaskLog {
    records: Mutex<Vec<TaskRecord>>,
    /// Output rows of running tasks so far, by (stage, task), as workers last said (`live`).
    live: Mutex<HashMap<(usize, usize), u64>>,
    /// Told when the first task is sent: the live watcher starts then.
    started: Arc<Notify>,
    /// Taken away once the run is over and its log is held beyond the call (a kept table's
    /// making): the callback holds Python objects that must not be held from Rust for long.
    progress: Mutex<Option<Arc<dyn ProgressSink>>>,
    /// Which run of the query this is: 1, then 2... when a lost worker made it run again.
    pub attempt: usize,
    /// Held from counting to calling back, so the callback sees `done` only grow. Never taken
    /// with the GIL held (tasks report from runtime threads), so it cannot deadlock with it.
    reporting: Mutex<()>,
    /// Why a stage's plan could not be sent, if it could not: tasks waiting for that plan
    /// later fail with a timeout, and this is the cause to report instead.
    unsent_plan: Mutex<Option<String>>,
    /// Bytes of the plan fragments sent to workers (encoded, or as encoded in this process).
    plan_bytes: std::sync::atomic::AtomicUsize,
    /// The trace context every task of the run is sent with (OpenTelemetry, from Python).
    trace: Mutex<Option<TaskTrace>>,
    /// How the run's joins were planned from their inputs' real sizes (`adaptive_joins`).
    decisions: Mutex<Vec<String>>,
    /// Why its stages have fewer tasks than workers, when other queries shared them (`load`).
    sizing: Mutex<Option<String>>,
}

impl std::fmt::Debug for TaskLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskLog").finish_non_exhaustive()
    }
}

impl TaskLog {
    pub fn with_progress(progress: Option<Arc<dyn ProgressSink>>, attempt: usize) -> Self {
        Self {
            records: Mutex::default(),
            live: Mutex::default(),
            started: Arc::default(),
            progress: Mutex::new(progress),
            attempt,
            reporting: Mutex::default(),
            unsent_plan: Mutex::default(),
            plan_bytes: Default::default(),
            trace: Mutex::default(),
            decisions: Mutex::default(),
            sizing: Mutex::default(),
        }
    }

    pub fn set_sizing(&self, why: String) {
        *self.sizing.lock().expect("poisoned") = Some(why);
    }

    /// Why its stages have fewer tasks than workers, if they do (see `load`).
    pub fn sizing(&self) -> Option<String> {
        self.sizing.lock().expect("poisoned").clone()
    }

    /// Records how the run's joins were planned from their inputs' real sizes.
    pub fn set_decisions(&self, decisions: Vec<String>) {
        *self.decisions.lock().expect("poisoned") = decisions;
    }

    /// How the run's joins were planned from their inputs' real sizes, one line each.
    pub fn decisions(&self) -> Vec<String> {
        self.decisions.lock().expect("poisoned").clone()
    }

    /// Sends every task of the run from now on under `trace`.
    pub fn set_trace(&self, trace: Option<TaskTrace>) {
        *self.trace.lock().expect("poisoned") = trace;
    }

    /// The trace context tasks are sent with, if the run is traced.
    pub fn trace(&self) -> Option<TaskTrace> {
        self.trace.lock().expect("poisoned").clone()
    }

    /// Counts `bytes` of a plan fragment sent to a worker.
    pub fn sent_plan_bytes(&self, bytes: usize) {
        use std::sync::atomic::Ordering;
        self.plan_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes of the plan fragments sent to workers so far.
    pub fn plan_bytes(&self) -> usize {
        self.plan_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records that a stage's plan could not be sent, and why (the first reason is kept).
    pub fn plan_not_sent(&self, why: String) {
        self.unsent_plan
            .lock()
            .expect("poisoned")
            .get_or_insert(why);
    }

    /// Why a stage's plan could not be sent, if one could not.
    pub fn unsent_plan(&self) -> Option<String> {
        self.unsent_plan.lock().expect("poisoned").clone()
    }

    /// Notified when the first task of the run is sent.
    pub fn started(&self) -> Arc<Notify> {
        Arc::clone(&self.started)
    }

    /// The query id and the workers of the tasks still running; None once all have ended.
    pub fn running(&self) -> Option<(Uuid, Vec<Url>)> {
        let records = self.records.lock().expect("poisoned");
        let running: Vec<&TaskRecord> =
            records.iter().filter(|r| r.finished_at.is_none()).collect();
        let query_id = running.first()?.query_id;
        let mut urls: Vec<Url> = running.iter().map(|r| r.url.clone()).collect();
        urls.sort();
        urls.dedup();
        Some((query_id, urls))
    }

    /// Takes the rows running tasks have produced so far, and reports each stage whose rows
    /// moved.
    pub fn live_rows(&self, rows: HashMap<(usize, usize), u64>) {
        let _in_order = self.reporting.lock().expect("poisoned");
        let moved: Vec<usize> = {
            let mut live = self.live.lock().expect("poisoned");
            let mut stages: Vec<usize> = rows
                .iter()
                .filter(|(k, v)| live.get(k) != Some(v))
                .map(|((stage, _), _)| *stage)
                .collect();
            stages.sort();
            stages.dedup();
            live.extend(rows);
            stages
        };
        for stage in moved {
            let records = self.records.lock().expect("poisoned");
            let Some(first) = records.iter().find(|r| r.stage == stage) else {
                continue;
            };
            let (total, url) = (first.task_count, first.url.clone());
            let done = count_done(&records, stage);
            drop(records);
            self.call(stage, done, total, display_url(&url), "rows");
        }
    }

    /// Rows the tasks of `stage` produced so far (finished ones' metrics, running ones' live
    /// count), and an estimate of the seconds left for the stage once some tasks finished.
    fn stage_rows_and_eta(&self, stage: usize) -> (Option<u64>, Option<f64>) {
        let records = self.records.lock().expect("poisoned");
        let live = self.live.lock().expect("poisoned");
        let tasks: Vec<&TaskRecord> = records.iter().filter(|r| r.stage == stage).collect();
        let mut rows = None;
        for r in &tasks {
            let n = match r.finished_at {
                Some(_) => r.output_rows.map(|n| n as u64),
                None => live.get(&(r.stage, r.task)).copied(),
            };
            if let Some(n) = n {
                rows = Some(rows.unwrap_or(0) + n);
            }
        }
        let total = tasks.first().map_or(0, |r| r.task_count);
        let done = tasks.iter().filter(|r| r.finished_at.is_some()).count();
        let eta = match (done, tasks.iter().map(|r| r.sent_at).min()) {
            (0, _) | (_, None) => None,
            (d, _) if d >= total => Some(0.0),
            (d, Some(start)) => {
                let elapsed = start.elapsed().as_secs_f64();
                Some(elapsed * (total - d) as f64 / d as f64)
            }
        };
        (rows, eta)
    }

    pub fn records(&self) -> Vec<TaskRecord> {
        self.records.lock().expect("poisoned").clone()
    }

    pub fn sent(&self, record: TaskRecord) {
        let (stage, total, url) = (record.stage, record.task_count, record.url.clone());
        let _in_order = self.reporting.lock().expect("poisoned");
        let done = {
            let mut records = self.records.lock().expect("poisoned");
            records.push(record);
            count_done(&records, stage)
        };
        self.started.notify_one();
        self.report(stage, done, total, &url);
    }

    pub fn finished(&self, stage: usize, task: usize, metrics: &TaskMetrics) {
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
            let summed = |name: &str| {
                metrics
                    .pre_order_plan_metrics
                    .iter()
                    .flat_map(|m| m.iter())
                    .filter(|x| x.value().name() == name)
                    .map(|x| x.value().as_usize())
                    .sum()
            };
            r.spill_count = Some(summed("spill_count"));
            r.spilled_bytes = Some(summed("spilled_bytes"));
            // The span is the task root's; a root the worker wrapped again carries it lower.
            r.worker_span = metrics.pre_order_plan_metrics.iter().find_map(read_span);
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
        self.call(stage, done, total, display_url(url), "task");
    }

    /// Tells the progress callback that this run failed because `worker` was lost, and the
    /// query runs again (as run `self.attempt + 1`).
    pub fn retrying(&self, worker: &str) {
        self.call(0, 0, 0, worker, "retry");
    }

    /// Stops reporting progress (see `progress`).
    pub fn detach_progress(&self) {
        self.progress.lock().expect("poisoned").take();
    }

    fn call(&self, stage: usize, done: usize, total: usize, url: &str, kind: &str) {
        let sink = self.progress.lock().expect("poisoned").clone();
        if let Some(sink) = &sink {
            let (rows, eta_s) = match kind {
                "retry" => (None, None),
                _ => self.stage_rows_and_eta(stage),
            };
            sink.update(ProgressUpdate {
                stage,
                done,
                total,
                worker: url,
                attempt: self.attempt,
                kind,
                rows,
                eta_s,
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
