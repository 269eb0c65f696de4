//! `process_meters()`: this process's counters and gauges, for the `/metrics` endpoint
//! (`metrics_endpoint.py`), read at each scrape.
use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::PyDict;

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
        ("grpc_errors", meters::GRPC_ERRORS.get()),
        ("task_events_dropped", meters::TASK_EVENTS_DROPPED.get()),
        ("memory_pool_used_bytes", pool_used),
        ("memory_pool_limit_bytes", pool_limit),
        ("spill_bytes", spill),
        ("kept_parts", kept_parts),
        ("kept_memory_bytes", kept_memory),
        ("kept_disk_bytes", kept_disk),
    ])
}

/// Starts (True) or stops keeping an event of each task this process runs, for its event
/// log (the worker CLI's `--event-log`).
#[pyfunction]
pub fn keep_task_events(on: bool) {
    meters::keep_task_events(on);
}

/// The tasks this process ended since the last call, as event-log records (without the
/// fields every record shares).
#[pyfunction]
pub fn take_task_events(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    meters::take_task_events()
        .into_iter()
        .map(|e| {
            let d = PyDict::new(py);
            d.set_item("query_id", e.query_id)?;
            d.set_item("stage", e.stage)?;
            d.set_item("task", e.task)?;
            d.set_item("tasks_in_stage", e.tasks)?;
            d.set_item("started", e.started_ns as f64 / 1e9)?;
            d.set_item("finished", e.ended_ns as f64 / 1e9)?;
            d.set_item("duration_ms", (e.ended_ns - e.started_ns) as f64 / 1e6)?;
            d.set_item("state", if e.failed { "failed" } else { "finished" })?;
            d.set_item("output_rows", e.rows_out)?;
            d.set_item("output_bytes", e.bytes_out)?;
            d.set_item("input_rows", e.rows_in)?;
            d.set_item("input_bytes", e.bytes_in)?;
            d.set_item("traceparent", e.traceparent)?;
            Ok(d)
        })
        .collect()
}
