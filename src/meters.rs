//! This process's counters for monitoring systems (Prometheus' `/metrics`, served from Python):
//! the tasks it ran, their rows and bytes, requests refused, and the runtimes whose memory and
//! spill it reports. Process-wide: a worker process's, or the embedded cluster's in the
//! coordinator's process.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use datafusion::execution::memory_pool::MemoryLimit;
use datafusion::execution::runtime_env::RuntimeEnv;

/// A counter of this process.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

pub static TASKS_STARTED: Counter = Counter::new();
pub static TASKS_FINISHED: Counter = Counter::new();
pub static TASKS_FAILED: Counter = Counter::new();
pub static ROWS_OUT: Counter = Counter::new();
pub static BYTES_OUT: Counter = Counter::new();
pub static ROWS_IN: Counter = Counter::new();
pub static BYTES_IN: Counter = Counter::new();
pub static REQUESTS_REFUSED: Counter = Counter::new();
/// gRPC calls this process answered with an error status, at once or inside a stream.
pub static GRPC_ERRORS: Counter = Counter::new();

/// One task this process ran, for its event log (`--event-log`).
#[derive(Debug, Clone)]
pub struct TaskEvent {
    pub query_id: String,
    pub stage: usize,
    pub task: usize,
    pub tasks: usize,
    /// Unix nanoseconds: the first partition started, the last one ended.
    pub started_ns: i64,
    pub ended_ns: i64,
    pub rows_out: u64,
    pub bytes_out: u64,
    pub rows_in: u64,
    pub bytes_in: u64,
    pub failed: bool,
    /// The trace context the task ran under, if it was traced.
    pub traceparent: Option<String>,
}

/// Kept past this many untaken, the oldest are dropped (and counted).
const EVENTS_KEPT: usize = 100_000;

/// The tasks ended since the log last took them; None while no log is kept.
static TASK_EVENTS: Mutex<Option<Vec<TaskEvent>>> = Mutex::new(None);
pub static TASK_EVENTS_DROPPED: Counter = Counter::new();

/// Starts (or stops) keeping an event of each task this process ends.
pub fn keep_task_events(on: bool) {
    let mut events = TASK_EVENTS.lock().expect("poisoned");
    match on {
        true => {
            events.get_or_insert_with(Vec::new);
        }
        false => *events = None,
    }
}

pub fn task_events_kept() -> bool {
    TASK_EVENTS.lock().expect("poisoned").is_some()
}

pub fn add_task_event(event: TaskEvent) {
    if let Some(events) = TASK_EVENTS.lock().expect("poisoned").as_mut() {
        if events.len() >= EVENTS_KEPT {
            events.remove(0);
            TASK_EVENTS_DROPPED.add(1);
        }
        events.push(event);
    }
}

/// The tasks ended since the last call.
pub fn take_task_events() -> Vec<TaskEvent> {
    TASK_EVENTS
        .lock()
        .expect("poisoned")
        .as_mut()
        .map(std::mem::take)
        .unwrap_or_default()
}

static RUNTIMES: Mutex<Vec<Weak<RuntimeEnv>>> = Mutex::new(Vec::new());

/// Reports `runtime`'s memory pool and spill files while it lives (a worker's).
pub fn watch_runtime(runtime: &Arc<RuntimeEnv>) {
    let mut runtimes = RUNTIMES.lock().expect("poisoned");
    runtimes.retain(|r| r.strong_count() > 0);
    runtimes.push(Arc::downgrade(runtime));
}

/// The memory pools' reserved bytes and limits (0: unbounded), and the bytes of spill files,
/// summed over the watched runtimes.
pub fn runtimes() -> (u64, u64, u64) {
    let runtimes = RUNTIMES.lock().expect("poisoned");
    let (mut used, mut limit, mut spill) = (0u64, 0u64, 0u64);
    for runtime in runtimes.iter().filter_map(Weak::upgrade) {
        used += runtime.memory_pool.reserved() as u64;
        if let MemoryLimit::Finite(bytes) = runtime.memory_pool.memory_limit() {
            limit += bytes as u64;
        }
        spill += runtime.disk_manager.used_disk_space();
    }
    (used, limit, spill)
}
