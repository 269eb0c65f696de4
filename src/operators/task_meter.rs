//! `TaskMeter`: a task's plan counted for this process's meters (`crate::meters`): started,
//! finished or failed, the rows and bytes it produced and those its leaves read.
//!
//! It stands in for the plan's root without being seen: its name, display, children,
//! properties and metrics are the root's, and downcasts reach the root (DataFusion's
//! `downcast_delegate`). So a task's plan keeps its shape, which its metrics are matched
//! by, node for node, on the coordinator.
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::NetworkBoundaryExt;
use futures::StreamExt;

use crate::meters;

#[derive(Debug)]
pub struct TaskMeter {
    root: Arc<dyn ExecutionPlan>,
    task: Arc<TaskRun>,
}

/// One task's run, counted once however many partitions it serves.
#[derive(Debug)]
struct TaskRun {
    started: AtomicBool,
    failed: AtomicBool,
    /// The plan whose leaves' rows are counted in when the run ends.
    root: Arc<dyn ExecutionPlan>,
}

impl Drop for TaskRun {
    fn drop(&mut self) {
        if !self.started.load(Ordering::Relaxed) {
            return;
        }
        match self.failed.load(Ordering::Relaxed) {
            true => meters::TASKS_FAILED.add(1),
            false => meters::TASKS_FINISHED.add(1),
        }
        let (rows, bytes) = leaves_read(&self.root);
        meters::ROWS_IN.add(rows);
        meters::BYTES_IN.add(bytes);
    }
}

impl TaskMeter {
    /// `plan` (a task's decoded fragment) counted; a network boundary at the root is left as
    /// it is (its subtree is the coordinator's business).
    pub fn wrap(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        if plan.is_network_boundary() {
            return plan;
        }
        let task = Arc::new(TaskRun {
            started: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            root: Arc::clone(&plan),
        });
        Arc::new(Self { root: plan, task })
    }
}

/// Rows and bytes the leaves of `plan` produced (what the task read: files, other tasks'
/// output, kept parts), from their metrics.
fn leaves_read(plan: &Arc<dyn ExecutionPlan>) -> (u64, u64) {
    let (mut rows, mut bytes) = (0u64, 0u64);
    let mut pending = vec![Arc::clone(plan)];
    while let Some(node) = pending.pop() {
        let children = node.children();
        if children.is_empty() || node.is_network_boundary() {
            if let Some(metrics) = node.metrics() {
                rows += metrics.output_rows().unwrap_or(0) as u64;
                bytes += bytes_scanned(&metrics);
            }
            continue;
        }
        pending.extend(children.into_iter().cloned());
    }
    (rows, bytes)
}

fn bytes_scanned(metrics: &MetricsSet) -> u64 {
    metrics
        .iter()
        .filter(|m| m.value().name() == "bytes_scanned")
        .map(|m| match m.value() {
            MetricValue::Count { count, .. } => count.value() as u64,
            _ => 0,
        })
        .sum()
}

impl DisplayAs for TaskMeter {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.root.fmt_as(t, f)
    }
}

impl ExecutionPlan for TaskMeter {
    fn name(&self) -> &str {
        self.root.name()
    }

    fn downcast_delegate(&self) -> Option<&dyn ExecutionPlan> {
        Some(self.root.as_ref())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.root.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.root.children()
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.root.apply_expressions(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let root = replace_children_if_necessary(Arc::clone(&self.root), children)?;
        Ok(Self::wrap(root))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        self.root.metrics()
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if !self.task.started.swap(true, Ordering::Relaxed) {
            meters::TASKS_STARTED.add(1);
        }
        let task = Arc::clone(&self.task);
        let stream = self.root.execute(partition, ctx);
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                task.failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        };
        let schema = stream.schema();
        let counted = stream.map(move |batch| {
            match &batch {
                Ok(b) => {
                    meters::ROWS_OUT.add(b.num_rows() as u64);
                    meters::BYTES_OUT.add(b.get_array_memory_size() as u64);
                }
                Err(_) => task.failed.store(true, Ordering::Relaxed),
            }
            batch
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, counted)))
    }
}
