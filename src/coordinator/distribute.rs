//! Cuts a physical plan into stages with datafusion-distributed's planner.
//!
//! Upstream: datafusion-distributed 4.0.0 plans only inside `DistributedQueryPlanner`
//! (`src/distributed_planner/distributed_query_planner.rs`), a `QueryPlanner` that starts from
//! a logical plan; `Precomputed` hands it our already-made physical plan instead.
use std::sync::{Arc, Mutex};

use crate::plan_rewrites::reveal_recursive_queries;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan};
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    DistributedConfig, DistributedExec, NetworkBoundary, NetworkCoalesceExec,
    SessionStateBuilderExt, Stage,
};

/// Runs datafusion-distributed's planner over an existing physical plan. The task context
/// returned carries what the planner registered (routing handlers): execution needs it.
///
/// When the planner finds nothing worth splitting (small inputs, one worker), the plan would
/// run in this process; the user asked for workers, so it becomes one stage run by a worker.
pub async fn distribute_plan(
    plan: Arc<dyn ExecutionPlan>,
    mut state: SessionState,
) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>)> {
    no_partial_reduce_of_grouping_sets(&plan, &mut state)?;
    let (distributed, task_ctx) = run_planner(Arc::clone(&plan), &state).await?;
    if distributed.is::<DistributedExec>() {
        return Ok((reveal_recursive_queries(distributed)?, task_ctx));
    }
    Ok((
        single_remote_stage(reveal_recursive_queries(plan)?)?,
        task_ctx,
    ))
}

/// Turns `partial_reduce` off for a plan that aggregates GROUPING SETS (ROLLUP, CUBE).
/// datafusion-distributed 4.0.0's extra pass groups the partial rows by the sets again
/// instead of by their columns and grouping id, and the answer changes (TPC-DS q5, q14, q18,
/// q67, q70, q77, q80, q86 gave wrong rows). The rest of such a query is unaffected.
fn no_partial_reduce_of_grouping_sets(
    plan: &Arc<dyn ExecutionPlan>,
    state: &mut SessionState,
) -> Result<()> {
    let options = state.config_mut().options_mut();
    if !DistributedConfig::from_config_options(options)?.partial_reduce {
        return Ok(());
    }
    let grouping_sets = plan.exists(|node| {
        Ok(node
            .downcast_ref::<AggregateExec>()
            .is_some_and(|agg| agg.group_expr().has_grouping_set()))
    })?;
    if grouping_sets {
        log::info!("partial_reduce is not applied to a query with GROUPING SETS / ROLLUP / CUBE");
        DistributedConfig::from_config_options_mut(options)?.partial_reduce = false;
    }
    Ok(())
}

/// `plan` as one stage of one task, gathered by the coordinator. datafusion-distributed's
/// planner elides such a stage (it would run locally), so it is assembled here.
fn single_remote_stage(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let boundary = NetworkCoalesceExec::try_new(plan, 1, 1)?;
    let Stage::Local(stage) = boundary.input_stage() else {
        return Err(DataFusionError::Internal(
            "new boundary without a local stage".into(),
        ));
    };
    let mut stage = stage.clone();
    stage.query_id = uuid::Uuid::new_v4();
    stage.num = 1;
    let boundary: Arc<dyn ExecutionPlan> = boundary.with_input_stage(Stage::Local(stage))?;
    // The coordinator's head gathers the stage (and gives the renderer a node above it).
    let head = Arc::new(CoalescePartitionsExec::new(boundary));
    Ok(Arc::new(
        DistributedExec::new(head).with_metrics_collection(true),
    ))
}

tokio::task_local! {
    /// The physical plan [`Precomputed`] gives the distributed planner in the current call.
    static PLANNED: Mutex<Option<Arc<dyn ExecutionPlan>>>;
}

/// The session state a planner starts each query from: DataFusion's default features and
/// datafusion-distributed's planner, built once (building registers every function, a cost
/// paid per query otherwise); queries clone it and set their own config.
pub fn planning_state(runtime_env: Arc<RuntimeEnv>) -> SessionState {
    // datafusion-distributed's planner wraps the query planner a state has (so it must be set
    // first): ours returns the already-planned physical plan of the current call.
    SessionStateBuilder::new()
        .with_default_features()
        .with_runtime_env(runtime_env)
        .with_query_planner(Arc::new(Precomputed))
        .with_distributed_planner()
        .build()
}

async fn run_planner(
    plan: Arc<dyn ExecutionPlan>,
    state: &SessionState,
) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>)> {
    let empty = LogicalPlan::EmptyRelation(EmptyRelation {
        produce_one_row: false,
        schema: Arc::new(DFSchema::empty()),
    });
    let planner = state.query_planner().create_physical_plan(&empty, state);
    let plan = PLANNED.scope(Mutex::new(Some(plan)), planner).await?;
    Ok((plan, state.task_ctx()))
}

#[derive(Debug)]
struct Precomputed;

#[async_trait]
impl QueryPlanner for Precomputed {
    async fn create_physical_plan(
        &self,
        _logical_plan: &LogicalPlan,
        _session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        PLANNED
            .try_with(|p| p.lock().expect("poisoned").take())
            .ok()
            .flatten()
            .ok_or_else(|| DataFusionError::Internal("no plan to distribute".into()))
    }
}
