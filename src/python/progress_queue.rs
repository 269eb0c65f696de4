//! `ProgressQueue`: a run's progress events held until Python reads them, for a query whose
//! progress nobody watches live (no bars, no callback): only its record in the monitor wants
//! them, and only when the record is read.
//!
//! Tasks report from the runtime's threads. A call into Python makes such a thread wait for
//! the GIL, which the user's own Python threads hold up to their switch interval (5 ms), while
//! every other task on that thread waits too. Held here, an event costs a lock and a push.
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use crate::coordinator::{ProgressSink, ProgressUpdate};

/// One event as `progress.to_rust`'s callback takes it: `(stage, done, total, worker_url,
/// attempt, kind, rows, eta_s)`.
type Event = (
    usize,
    usize,
    usize,
    String,
    usize,
    &'static str,
    Option<u64>,
    Option<f64>,
);

/// The events not read yet; a stage's task and rows events replace its earlier ones of the
/// same run (a record keeps only each stage's latest), so a long run holds one per stage.
#[derive(Default)]
pub struct Pending(Mutex<Vec<Event>>);

impl ProgressSink for Pending {
    fn update(&self, u: ProgressUpdate<'_>) {
        let kind = match u.kind {
            "retry" => "retry",
            "rows" => "rows",
            _ => "task",
        };
        let event = (
            u.stage,
            u.done,
            u.total,
            u.worker.to_string(),
            u.attempt,
            kind,
            u.rows,
            u.eta_s,
        );
        let mut pending = self.0.lock().expect("poisoned");
        let same = |e: &&mut Event| e.5 != "retry" && e.0 == u.stage && e.4 == u.attempt;
        match pending.iter_mut().rev().find(same) {
            Some(earlier) if kind != "retry" => *earlier = event,
            _ => pending.push(event),
        }
    }
}

/// Progress events held for Python (see the module's doc); `drain` hands them over in order.
#[pyclass(frozen, module = "datafusion_distributed_py._internal")]
pub struct ProgressQueue(pub Arc<Pending>);

#[pymethods]
impl ProgressQueue {
    #[new]
    fn new() -> Self {
        Self(Arc::default())
    }

    /// The events held since the last call, oldest first.
    fn drain(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0 .0.lock().expect("poisoned"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(stage: usize, done: usize, attempt: usize, kind: &str) -> ProgressUpdate<'_> {
        ProgressUpdate {
            stage,
            done,
            total: 2,
            worker: "w",
            attempt,
            kind,
            rows: Some(done as u64),
            eta_s: None,
        }
    }

    #[test]
    fn a_stages_later_events_replace_its_earlier_ones_of_the_same_run_only_and_keep_their_kind() {
        let pending = Pending::default();
        pending.update(update(1, 0, 1, "task"));
        pending.update(update(2, 0, 1, "task"));
        pending.update(update(1, 1, 1, "rows"));
        pending.update(update(0, 0, 1, "retry"));
        pending.update(update(1, 0, 2, "task"));
        pending.update(update(1, 2, 2, "task"));
        let held = std::mem::take(&mut *pending.0.lock().unwrap());
        let seen: Vec<_> = held.iter().map(|e| (e.0, e.1, e.4, e.5)).collect();
        assert_eq!(
            seen,
            vec![
                (1, 1, 1, "rows"),
                (2, 0, 1, "task"),
                (0, 0, 1, "retry"),
                (1, 2, 2, "task"),
            ]
        );
    }
}
