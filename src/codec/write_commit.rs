//! `SumCounts` (`operators::SumCounts`) in fragments: a tag and its run's directory.
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::physical_plan::ExecutionPlan;
use object_store::path::Path as ObjectPath;

use crate::operators::{Staging, SumCounts};
use crate::plan_nodes::only;

const TAG: &[u8] = b"dfdpy.sum-counts:";

/// Writes a `SumCounts` and its run's directory. It is meant for the coordinator, but when the
/// whole write is one task (one worker, `max_tasks_per_stage=1`) the distributed planner sends
/// all of it, this node included, to that task's worker, which then commits.
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let sum = node.downcast_ref::<SumCounts>()?;
    let staging = sum.staging().parts();
    buf.extend_from_slice(TAG);
    Some(
        serde_json::to_writer(&mut *buf, &staging).map_err(|e| DataFusionError::External(e.into())),
    )
}

/// The `SumCounts` `buf` stands for, over its decoded input, if `buf` is one.
pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let rest = buf.strip_prefix(TAG)?;
    let decoded = || -> Result<Arc<dyn ExecutionPlan>> {
        let [store, target, private]: [String; 3] =
            serde_json::from_slice(rest).map_err(|e| DataFusionError::External(e.into()))?;
        let path =
            |raw: &str| ObjectPath::parse(raw).map_err(|e| DataFusionError::External(e.into()));
        let staging = Staging::new(
            ObjectStoreUrl::parse(store)?,
            path(&target)?,
            path(&private)?,
        );
        Ok(Arc::new(SumCounts::new(
            only(inputs, "SumCounts")?,
            staging,
        )))
    };
    Some(decoded())
}
