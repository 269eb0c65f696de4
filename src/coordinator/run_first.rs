//! Work run on the workers while a query is planned, to plan it from what that work
//! produces: a join's build side run first (`adaptive_joins`), a probe side sampled for hot
//! keys (`skewed_keys`).
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use futures::StreamExt;

use super::distribute::distribute_plan;
use crate::errors::{worker_failure, FailureKind};
use crate::plan_rewrites;

/// How work runs while planning: with the query's state, its workers and stall timeout.
pub struct Run<'a> {
    pub state: &'a SessionState,
    pub stall_timeout: Option<Duration>,
    /// The workers the query runs on (how many ways a hot key is split).
    pub workers: usize,
}

/// Runs `plan` on the workers while planning and hands its batches to `take` until it says
/// stop (the rest is not computed) or they end; whether they ended. Waits for each batch at
/// most the query's stall timeout: planning never hangs on a worker that stopped answering.
pub async fn run_first(
    plan: Arc<dyn ExecutionPlan>,
    run: &Run<'_>,
    what: &str,
    mut take: impl FnMut(RecordBatch) -> Result<bool>,
) -> Result<bool> {
    let state = run.state;
    let plan = plan_rewrites::prepare(plan, state.config_options())?;
    let (plan, task_ctx): (_, Arc<TaskContext>) = distribute_plan(plan, state.clone()).await?;
    let mut stream = execute_stream(plan, task_ctx)?;
    loop {
        let next = match run.stall_timeout {
            Some(wait) => tokio::time::timeout(wait, stream.next())
                .await
                .map_err(|_| stalled(what, wait))?,
            None => stream.next().await,
        };
        let Some(batch) = next.transpose()? else {
            return Ok(true);
        };
        if !take(batch)? {
            return Ok(false);
        }
    }
}

fn stalled(what: &str, wait: Duration) -> datafusion::common::DataFusionError {
    worker_failure(
        None,
        FailureKind::Stalled,
        format!(
            "stalled: {what}, gave no batch for {} s; given up after \
             DistributedConfig.stall_timeout = {} s",
            wait.as_secs(),
            wait.as_secs_f64()
        ),
    )
}
