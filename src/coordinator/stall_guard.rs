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
    /// Told when the guard is dropped: the watcher ends at once.
    gone: Arc<Notify>,
}

impl StallGuard {
    /// A guard over `query`'s runs that fails a wait of more than `limit` without progress.
    pub fn start(query: &Arc<Query>, limit: Duration) -> Self {
        let shared = Arc::new(Shared::default());
        // Weak both: the watcher must keep neither the stream's state nor the query (its
        // plan, session, cluster) alive once the reader lets go of them.
        let weak = Arc::downgrade(&shared);
        crate::runtime::handle().spawn(watch(weak, Arc::downgrade(query), limit));
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

impl Drop for StallGuard {
    fn drop(&mut self) {
        self.shared.gone.notify_one();
    }
}

async fn watch(shared: Weak<Shared>, query: Weak<Query>, limit: Duration) {
    let check = (limit / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut finished = 0;
    let mut rows: Option<u64> = None;
    let mut moved_at = Instant::now();
    let gone = match shared.upgrade() {
        Some(shared) => Arc::clone(&shared.gone),
        None => return,
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(check) => {}
            _ = gone.notified() => return,
        }
        let (Some(shared), Some(query)) = (shared.upgrade(), query.upgrade()) else {
            return;
        };
        let Some(waiting_since) = *shared.waiting_since.lock().expect("poisoned") else {
            continue;
        };
        let Some(log) = query.latest_log() else {
            continue;
        };
        let records = log.records();
        let now_finished = records.iter().filter(|r| r.finished_at.is_some()).count();
        if now_finished != finished {
            finished = now_finished;
            moved_at = Instant::now();
        }
        let still = Instant::now().duration_since(waiting_since.max(moved_at));
        if still < limit {
            continue;
        }
        // Nothing seen from here for the whole limit: only now ask the workers (it costs
        // them a call each) whether the run's tasks produce rows or use CPU.
        // Rows are compared with the previous ask: the first one only sets the mark.
        let (now_rows, busy) = query.planner.activity(&log).await;
        let known = rows.replace(now_rows);
        if busy || known.is_some_and(|k| k != now_rows) {
            moved_at = Instant::now();
            continue;
        }
        if known.is_none() {
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
