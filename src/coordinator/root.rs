//! The node datafusion-python sees: a leaf that runs our distributed plan.
//!
//! It has no children, so the stock planner never looks inside the distributed plan, and it
//! ignores the TaskContext that comes over FFI (whose config extensions and runtime are
//! defaults) in favour of the one built at planning time, which carries the worker and channel
//! resolvers and the object stores.
use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

#[derive(Debug)]
pub struct DistributedRootExec {
    inner: Arc<dyn ExecutionPlan>,
    task_ctx: Arc<TaskContext>,
}

impl DistributedRootExec {
    pub fn new(inner: Arc<dyn ExecutionPlan>, task_ctx: Arc<TaskContext>) -> Self {
        Self { inner, task_ctx }
    }
}

impl DisplayAs for DistributedRootExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DistributedRootExec: {}", self.inner.name())
    }
}

impl ExecutionPlan for DistributedRootExec {
    fn name(&self) -> &str {
        "DistributedRootExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _foreign_ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, Arc::clone(&self.task_ctx))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.inner.metrics()
    }
}
