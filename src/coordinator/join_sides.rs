//! The shapes of a join's sides that planning from real sizes looks for.
use std::sync::Arc;

use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};

/// Whether `plan` only reads and passes on rows (scans of files, memory or kept tables,
/// filters, projections, repartitions): its first rows cost little to read.
pub fn scans_only(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let reads = plan.is::<DataSourceExec>()
        || plan.is::<crate::kept::KeptScanExec>()
        || plan.is::<FilterExec>()
        || plan.is::<ProjectionExec>()
        || plan.is::<RepartitionExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<CooperativeExec>();
    reads && plan.children().into_iter().all(scans_only)
}

/// `plan` below the hash repartitions that feed a partitioned join.
pub fn below_shuffle(plan: &Arc<dyn ExecutionPlan>) -> &Arc<dyn ExecutionPlan> {
    let mut plan = plan;
    while let Some(shuffle) = plan.downcast_ref::<RepartitionExec>() {
        if !matches!(shuffle.partitioning(), Partitioning::Hash(..)) {
            break;
        }
        plan = shuffle.input();
    }
    plan
}
