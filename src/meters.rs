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
