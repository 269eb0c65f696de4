//! `SnapshotScanExec`: a snapshot's native scan as one leaf, so that it crosses FFI whole.
//!
//! datafusion-python sees a foreign leaf it cannot look into; [`super::WireCodec`]
//! writes the plan inside it, which is all native nodes. Run single-node through FFI, the scan
//! gets a runtime without the session's object stores: it registers the table's own.
use std::fmt;
use std::sync::{Arc, OnceLock};

use datafusion::common::{Result, Statistics};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

use crate::object_stores::{register_all, StoreSpec};

#[derive(Debug)]
pub struct SnapshotScanExec {
    table: String,
    inner: Arc<dyn ExecutionPlan>,
    stores: Vec<StoreSpec>,
    /// A runtime with `stores`, made on first use.
    runtime: OnceLock<Arc<RuntimeEnv>>,
}

impl SnapshotScanExec {
    pub fn new(table: String, inner: Arc<dyn ExecutionPlan>, stores: Vec<StoreSpec>) -> Self {
        Self {
            table,
            inner,
            stores,
            runtime: OnceLock::new(),
        }
    }

    /// The native scan, as it travels to workers.
    pub fn inner(&self) -> &Arc<dyn ExecutionPlan> {
        &self.inner
    }

    /// The stores its files live on.
    pub fn stores(&self) -> &[StoreSpec] {
        &self.stores
    }

    fn with_stores(&self, ctx: Arc<TaskContext>) -> Result<Arc<TaskContext>> {
        if self.stores.is_empty() {
            return Ok(ctx);
        }
        let runtime = match self.runtime.get() {
            Some(r) => Arc::clone(r),
            None => {
                let runtime = Arc::new(RuntimeEnv::default());
                register_all(&runtime, &self.stores)?;
                Arc::clone(self.runtime.get_or_init(|| runtime))
            }
        };
        Ok(Arc::new(TaskContext::new(
            ctx.task_id(),
            ctx.session_id(),
            ctx.session_config().clone(),
            Default::default(),
            Default::default(),
            Default::default(),
            Default::default(),
            runtime,
        )))
    }
}

impl DisplayAs for SnapshotScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SnapshotScanExec: table={}", self.table)
    }
}

impl ExecutionPlan for SnapshotScanExec {
    crate::plan_nodes::leaf_node!("SnapshotScanExec");

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    /// The native scan's (the log's row counts and file sizes): without them the planner
    /// cannot see that a dimension table is small, and shuffles both sides of its joins
    /// instead of broadcasting it.
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        StatisticsContext::new().compute(self.inner.as_ref(), args)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, self.with_stores(context)?)
    }
}
