//! `MergeTaskPartitions` (`operators::MergeTaskPartitions`) in fragments: a marker with its
//! input.
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

use crate::operators::MergeTaskPartitions;
use crate::plan_nodes::{decode_marker, encode_marker};

const TAG: &[u8] = b"dfdpy.merge-task-partitions";

pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    encode_marker::<MergeTaskPartitions>(node, TAG, buf)
}

pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    decode_marker(buf, TAG, inputs, "MergeTaskPartitions")
        .map(|input| input.map(|input| Arc::new(MergeTaskPartitions::new(input)) as _))
}
