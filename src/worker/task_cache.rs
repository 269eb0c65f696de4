//! Frees the state of cancelled tasks on a worker promptly.
//!
//! datafusion-distributed keeps each task's plan in a moka cache and removes it when its query
//! ends, but moka only drops a removed value during housekeeping, which runs on later accesses
//! to the cache. After a cancelled query nothing may access it again, so the removed plan, and
//! the partitions its `RepartitionExec`s keep computing in spawned tasks, would live on until
//! the next query. A sweep every second reads the cache, and a read runs that housekeeping.
//!
//! Upstream: datafusion-distributed 4.0.0 `src/worker/worker_service.rs` keeps the cache
//! private; its only maintenance call, `Worker::tasks_running`, sits behind the crate's
//! `integration` feature, which also changes planner defaults and pulls test tooling into the
//! build. The public way in is `Worker::execute_task`, whose first step is a cache lookup
//! (`get_with`): the sweep looks up one key no query uses and stops waiting at once. The key's
//! entry is never given a plan, so it holds nothing and is never listed as a task.
use std::time::Duration;

use datafusion::common::runtime::SpawnedTask;
use datafusion_distributed::{ExecuteTaskRequest, ProducerHead, TaskKey, Worker};
use uuid::Uuid;

use crate::runtime;

const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Long enough for the lookup to finish; the wait for a plan that never comes is cut here.
const LOOKUP_FOR: Duration = Duration::from_millis(20);

/// Sweeps `worker`'s task cache until the returned task is dropped.
pub fn sweep(worker: Worker) -> SpawnedTask<()> {
    let _in_runtime = runtime::runtime().enter();
    SpawnedTask::spawn(async move {
        let mut every = tokio::time::interval(SWEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // The lookup runs moka's pending maintenance, dropping removed entries.
            let _ = tokio::time::timeout(LOOKUP_FOR, worker.execute_task(lookup())).await;
        }
    })
}

/// A request for a task no query has: the nil query id is never drawn (ids are v4).
fn lookup() -> ExecuteTaskRequest {
    ExecuteTaskRequest {
        task_key: TaskKey {
            query_id: Uuid::nil(),
            stage_id: usize::MAX,
            task_number: 0,
        },
        target_partition_start: 0,
        target_partition_end: 0,
        producer_head: ProducerHead::None,
    }
}
