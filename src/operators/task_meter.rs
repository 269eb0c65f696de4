//! `TaskMeter`: a task's plan counted for this process's meters (`crate::meters`): started,
//! finished or failed, the rows and bytes it produced and those its leaves read.
//!
//! It stands in for the plan's root without being seen: its name, display, children,
//! properties and metrics are the root's, and downcasts reach the root (DataFusion's
//! `downcast_delegate`). So a task's plan keeps its shape, which its metrics are matched
//! by, node for node, on the coordinator.
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::metrics::{MetricValue, MetricsSet};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::{BroadcastExec, NetworkBoundaryExt};
use futures::StreamExt;

use crate::meters;
use crate::protocol::task_headers::{SpanMetrics, TaskKey, TaskTrace};

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
    /// The task's span, timed when its request carried a trace context.
    span: OnceLock<SpanMetrics>,
    /// For this process's event log, when it keeps one: which task, and what it did.
    key: OnceLock<(TaskKey, Option<String>)>,
    started_ns: AtomicI64,
    ended_ns: AtomicI64,
    rows_out: AtomicU64,
    bytes_out: AtomicU64,
    ended_partitions: AtomicUsize,
    logged: AtomicBool,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
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
        self.log_event();
    }
}

impl TaskRun {
    /// Adds the task's record to this process's event log, once: when its last partition
    /// ended, or when it is dropped before that (failed, or not read to the end).
    fn log_event(&self) {
        let Some((key, traceparent)) = self.key.get() else {
            return;
        };
        if self.logged.swap(true, Ordering::Relaxed) {
            return;
        }
        let (rows_in, bytes_in) = leaves_read(&self.root);
        meters::add_task_event(meters::TaskEvent {
            query_id: key.query_id.clone(),
            stage: key.stage,
            task: key.task,
            tasks: key.tasks,
            started_ns: self.started_ns.load(Ordering::Relaxed),
            // A failed task's streams may never reach their end.
            ended_ns: match self.ended_ns.load(Ordering::Relaxed) {
                0 => now_ns(),
                ended => ended,
            },
            rows_out: self.rows_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            rows_in,
            bytes_in,
            failed: self.failed.load(Ordering::Relaxed),
            traceparent: traceparent.clone(),
        });
    }
}

impl TaskMeter {
    /// `plan` (a task's decoded fragment) counted; a network boundary at the root is left as
    /// it is (its subtree is the coordinator's business).
    pub fn wrap(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        if plan.is_network_boundary() {
            return plan;
        }
        // The head of a shuffle's or a broadcast's producing stage is rebuilt by the worker
        // over its input (datafusion-distributed's `ProducerHead::insert`): the task is
        // counted below it, or the rebuilt head would leave the meter out.
        if plan.is::<RepartitionExec>() || plan.is::<BroadcastExec>() {
            if let [input] = plan.children().as_slice() {
                let metered = Self::wrap(Arc::clone(input));
                return replace_children_if_necessary(Arc::clone(&plan), vec![metered])
                    .unwrap_or(plan);
            }
        }
        let task = Arc::new(TaskRun {
            started: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            root: Arc::clone(&plan),
            span: OnceLock::new(),
            key: OnceLock::new(),
            started_ns: AtomicI64::new(0),
            ended_ns: AtomicI64::new(0),
            rows_out: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            ended_partitions: AtomicUsize::new(0),
            logged: AtomicBool::new(false),
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
        let mut metrics = self.root.metrics();
        if let Some(span) = self.task.span.get() {
            span.add_to(metrics.get_or_insert_with(MetricsSet::new));
        }
        metrics
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let trace = ctx.session_config().get_extension::<TaskTrace>();
        if !self.task.started.swap(true, Ordering::Relaxed) {
            meters::TASKS_STARTED.add(1);
            self.task.started_ns.store(now_ns(), Ordering::Relaxed);
            let key = ctx.session_config().get_extension::<TaskKey>();
            if let (Some(key), true) = (key, meters::task_events_kept()) {
                let traceparent = trace.as_ref().map(|t| t.traceparent.clone());
                let _ = self.task.key.set(((*key).clone(), traceparent));
            }
        }
        if let Some(trace) = &trace {
            self.task.span.get_or_init(|| SpanMetrics::start(trace));
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
                    let (rows, bytes) = (b.num_rows() as u64, b.get_array_memory_size() as u64);
                    meters::ROWS_OUT.add(rows);
                    meters::BYTES_OUT.add(bytes);
                    task.rows_out.fetch_add(rows, Ordering::Relaxed);
                    task.bytes_out.fetch_add(bytes, Ordering::Relaxed);
                }
                Err(_) => task.failed.store(true, Ordering::Relaxed),
            }
            batch
        });
        let ended = Arc::clone(&self.task);
        let counted = counted.chain(
            futures::stream::poll_fn(move |_| {
                ended.ended_ns.fetch_max(now_ns(), Ordering::Relaxed);
                if let Some(span) = ended.span.get() {
                    span.partition_ended();
                }
                let partitions = ended.root.properties().partitioning.partition_count();
                if ended.ended_partitions.fetch_add(1, Ordering::Relaxed) + 1 >= partitions {
                    ended.log_event();
                }
                std::task::Poll::Ready(None)
            })
            .fuse(),
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, counted)))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::{collect, Partitioning};
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::protocol::task_headers::read_span;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    /// A shuffle's producing stage: the worker rebuilds the head over its input, as
    /// datafusion-distributed's `ProducerHead::insert` does; the task is still metered and
    /// timed under the trace context its session carries.
    #[tokio::test]
    async fn a_shuffle_head_rebuilt_by_the_worker_keeps_the_meter() {
        let ctx = SessionContext::new();
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let column = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column]).unwrap();
        let input = MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap();
        let head = RepartitionExec::try_new(input, Partitioning::RoundRobinBatch(2)).unwrap();
        let wrapped = TaskMeter::wrap(Arc::new(head));
        let head = wrapped
            .downcast_ref::<RepartitionExec>()
            .expect("still the head");
        let rebuilt: Arc<dyn ExecutionPlan> = Arc::new(
            RepartitionExec::try_new(Arc::clone(head.input()), Partitioning::RoundRobinBatch(3))
                .unwrap(),
        );
        let mut config = ctx.copied_config();
        config.set_extension(Arc::new(TaskTrace::parse(PARENT).unwrap()));
        let task_ctx = Arc::new(TaskContext::default().with_session_config(config));
        let batches = collect(Arc::clone(&rebuilt), task_ctx).await.unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
        let metered = rebuilt.children()[0];
        let span = read_span(&metered.metrics().expect("metrics")).expect("a span");
        assert_eq!(span.traceparent, PARENT);
        assert!(span.start_ns <= span.end_ns);
        assert_eq!(
            metered.name(),
            "DataSourceExec",
            "it stands in for the input unseen"
        );
    }
}
