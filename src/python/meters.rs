//! `process_meters()`: this process's counters and gauges, for the `/metrics` endpoint
//! (`metrics_endpoint.py`), read at each scrape.
use std::collections::HashMap;

use pyo3::prelude::*;

use crate::meters;

/// Name -> value of each meter of this process (counters only grow; the rest are gauges).
#[pyfunction]
pub fn process_meters() -> HashMap<&'static str, u64> {
    let (pool_used, pool_limit, spill) = meters::runtimes();
    let (kept_parts, kept_memory, kept_disk) = crate::kept::store::held();
    let started = meters::TASKS_STARTED.get();
    let (finished, failed) = (meters::TASKS_FINISHED.get(), meters::TASKS_FAILED.get());
    HashMap::from([
        ("tasks_started", started),
        ("tasks_finished", finished),
        ("tasks_failed", failed),
        ("tasks_running", started.saturating_sub(finished + failed)),
        ("rows_out", meters::ROWS_OUT.get()),
        ("bytes_out", meters::BYTES_OUT.get()),
        ("rows_in", meters::ROWS_IN.get()),
        ("bytes_in", meters::BYTES_IN.get()),
        ("requests_refused", meters::REQUESTS_REFUSED.get()),
        ("memory_pool_used_bytes", pool_used),
        ("memory_pool_limit_bytes", pool_limit),
        ("spill_bytes", spill),
        ("kept_parts", kept_parts),
        ("kept_memory_bytes", kept_memory),
        ("kept_disk_bytes", kept_disk),
    ])
}
