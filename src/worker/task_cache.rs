//! Frees the state of cancelled tasks on a worker promptly.
//!
//! datafusion-distributed keeps each task's plan in a moka cache and removes it when its query
//! ends, but moka only drops a removed value during housekeeping, which runs on later accesses
//! to the cache. After a cancelled query nothing may access it again, so the removed plan, and
//! the partitions its `RepartitionExec`s keep computing in spawned tasks, would live on until
//! the next query. A sweep every second runs that housekeeping.
//!
//! Upstream: datafusion-distributed 4.0.0 `src/worker/worker_service.rs` keeps the cache
//! private; `Worker::tasks_running` (behind its `integration` feature) is the only way in.
use std::time::Duration;

use datafusion::common::runtime::SpawnedTask;
use datafusion_distributed::Worker;

use crate::runtime;

const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Sweeps `worker`'s task cache until the returned task is dropped.
pub fn sweep(worker: Worker) -> SpawnedTask<()> {
    let _in_runtime = runtime::runtime().enter();
    SpawnedTask::spawn(async move {
        let mut every = tokio::time::interval(SWEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // Runs moka's pending maintenance, dropping removed entries.
            worker.tasks_running().await;
        }
    })
}
