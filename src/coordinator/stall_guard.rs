//! The stall guard: a reader that waits for a batch while nothing of the query moves fails,
//! after `stall_timeout`, with an error naming the tasks it waited for and their workers.
//!
//! "Moves" is anything a running query does: a batch reaches the reader, a task ends, the
//! rows a running task produced grow, or a worker of the run is using CPU (a sort merging its
//! spill files produces no rows for a while, but works). A query whose workers are all idle
//! while its reader waits is waiting for something that will not come — a cause we know is
//! fixed where it is; this turns one we do not know into an error instead of a stuck session.
//! Only time the reader spends waiting counts: a reader that pauses holds the workers back
//! (backpressure), and that is not a stall.
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use futures::{Stream, StreamExt};
use tokio::sync::Notify;

use super::query::Query;
use crate::errors::{worker_failure, FailureKind};
use crate::protocol::display_url;

/// Watches one stream of a query's result while its reader waits.
pub struct StallGuard {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// Since when the reader waits for a batch; None while it holds one.
    waiting_since: Mutex<Option<Instant>>,
    /// The error, once the query stalled.
    stalled: Mutex<Option<DataFusionError>>,
    told: Notify,
}

/// What a run has done so far, as seen from the coordinator.
#[derive(PartialEq, Eq, Default, Clone, Copy)]
struct Mark {
    finished_tasks: usize,
    rows: u64,
}

impl StallGuard {
    /// A guard over `query`'s runs that fails a wait of more than `limit` without progress.
    pub fn start(query: &Arc<Query>, limit: Duration) -> Self {
        let shared = Arc::new(Shared::default());
        let weak = Arc::downgrade(&shared);
        let query = Arc::clone(query);
        crate::runtime::handle().spawn(watch(weak, query, limit));
        Self { shared }
    }

    /// The next item of `stream`, or the stall error if the query stalls meanwhile.
    pub async fn next<S, T>(&self, stream: &mut S) -> Option<Result<T>>
    where
        S: Stream<Item = Result<T>> + Unpin,
    {
        *self.shared.waiting_since.lock().expect("poisoned") = Some(Instant::now());
        let item = loop {
            if let Some(err) = self.shared.stalled.lock().expect("poisoned").take() {
                break Some(Err(err));
            }
            tokio::select! {
                item = stream.next() => break item,
                _ = self.shared.told.notified() => continue,
            }
        };
        *self.shared.waiting_since.lock().expect("poisoned") = None;
        item
    }
}

async fn watch(shared: Weak<Shared>, query: Arc<Query>, limit: Duration) {
    let check = (limit / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut last = Mark::default();
    let mut moved_at = Instant::now();
    loop {
        tokio::time::sleep(check).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(waiting_since) = *shared.waiting_since.lock().expect("poisoned") else {
            continue;
        };
        let Some(log) = query.latest_log() else {
            continue;
        };
        let records = log.records();
        let finished_tasks = records.iter().filter(|r| r.finished_at.is_some()).count();
        let (rows, busy) = query.planner.activity(&log).await;
        let mark = Mark {
            finished_tasks,
            rows,
        };
        if mark != last || busy {
            last = mark;
            moved_at = Instant::now();
        }
        let still = Instant::now().duration_since(waiting_since.max(moved_at));
        if still < limit {
            continue;
        }
        let running: Vec<String> = records
            .iter()
            .filter(|r| r.finished_at.is_none())
            .map(|r| {
                format!(
                    "stage {} task {} on {}",
                    r.stage,
                    r.task,
                    display_url(&r.url)
                )
            })
            .collect();
        let worker = records
            .iter()
            .find(|r| r.finished_at.is_none())
            .map(|r| display_url(&r.url).to_string());
        let what = match running.is_empty() {
            true => "every task had ended".to_string(),
            false => format!("still running: {}", running.join(", ")),
        };
        let err = worker_failure(
            worker.as_deref(),
            FailureKind::Stalled,
            format!(
                "stalled: the query made no progress for {} s while its result was awaited: no batch \
                 arrived, no task ended or produced rows and no worker of the run used CPU \
                 ({what}); given up after DistributedConfig.stall_timeout = {} s",
                still.as_secs(),
                limit.as_secs_f64()
            ),
        );
        *shared.stalled.lock().expect("poisoned") = Some(err);
        shared.told.notify_one();
        return;
    }
}
