//! `MergeTaskPartitions`: a task's partitions merged into one, inside the task.
//!
//! A file sink wants one input partition. Merged by a `CoalescePartitionsExec`, the
//! distributed planner would cut a stage there and bring every task's rows to one place to be
//! written; merged by this node, which it does not know, each task writes its own share (see
//! `plan_rewrites::parallel_writes`). It travels to workers as a marker with its input
//! (`codec::task_merge`).
use std::fmt;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};

use crate::plan_nodes::one_partition;

#[derive(Debug)]
pub struct MergeTaskPartitions {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl MergeTaskPartitions {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            input.pipeline_behavior(),
            input.boundedness(),
        );
        Self {
            input,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for MergeTaskPartitions {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MergeTaskPartitions")
    }
}

impl ExecutionPlan for MergeTaskPartitions {
    crate::plan_nodes::one_input_node!("MergeTaskPartitions", input, |_this, input| Self::new(
        input
    ));

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        one_partition(partition, "MergeTaskPartitions")?;
        CoalescePartitionsExec::new(Arc::clone(&self.input)).execute(0, ctx)
    }
}
