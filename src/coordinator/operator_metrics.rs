//! A finished run's metrics per operator, in the order datafusion-python walks a plan.
//!
//! datafusion-python's metrics API reads an operator tree (`execution_plan().metrics()`,
//! `collect_metrics()`). The distributed plan is that tree cut into stages: walked from the
//! head, each network boundary is followed into its input stage, so the operators come in the
//! single-node plan's pre-order with the distributed ones (boundaries, leaves of tasks)
//! among them. Each carries its metrics summed over the tasks that ran it.
use std::sync::Arc;

use datafusion::physical_plan::metrics::MetricValue;
use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion_distributed::{DistributedExec, DistributedLeafExec, NetworkBoundaryExt};

use crate::protocol::task_headers::is_span_metric;

/// One operator of the run: its name (`AggregateExec`), its one-line display and metrics.
pub struct OperatorMetrics {
    pub name: String,
    pub line: String,
    /// The stage that runs it (0: the coordinator's head; a network boundary is in the stage
    /// that reads through it).
    pub stage: usize,
    pub metrics: Vec<MetricRow>,
}

pub struct MetricRow {
    pub name: String,
    /// Counters, gauges and times (nanoseconds); `None` for timestamps.
    pub value: Option<usize>,
    /// Start and end timestamps, in nanoseconds since the epoch (if set).
    pub timestamp_ns: Option<i64>,
    pub partition: Option<usize>,
    pub labels: Vec<(String, String)>,
}

/// The operators of `plan` (a distributed plan rewritten with its run's metrics) in pre-order,
/// stages expanded where their boundaries are.
pub fn operator_metrics(plan: &Arc<dyn ExecutionPlan>) -> Vec<OperatorMetrics> {
    let mut out = Vec::new();
    match plan.downcast_ref::<DistributedExec>() {
        Some(_) => plan
            .children()
            .into_iter()
            .for_each(|c| walk(c, 0, &mut out)),
        None => walk(plan, 0, &mut out),
    }
    out
}

fn walk(node: &Arc<dyn ExecutionPlan>, stage: usize, out: &mut Vec<OperatorMetrics>) {
    // A leaf split into tasks stands for the operator it split.
    let shown = match node.downcast_ref::<DistributedLeafExec>() {
        Some(leaf) => displayable(leaf.original().as_ref()).one_line().to_string(),
        None => displayable(node.as_ref()).one_line().to_string(),
    };
    let line = shown.trim_end().to_string();
    let name = line
        .split(':')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    // A task's span timestamps describe the task, not its root operator.
    let metrics = node
        .metrics()
        .map(|set| set.iter().filter(|m| !is_span_metric(m)).map(row).collect());
    out.push(OperatorMetrics {
        name,
        line,
        stage,
        metrics: metrics.unwrap_or_default(),
    });
    if let Some(boundary) = node.as_network_boundary() {
        let input = boundary.input_stage();
        if let Some(plan) = input.local_plan() {
            walk(plan, input.num(), out);
        }
        return;
    }
    for child in node.children() {
        walk(child, stage, out);
    }
}

fn row(metric: &Arc<datafusion::physical_plan::metrics::Metric>) -> MetricRow {
    let value = metric.value();
    let timestamp_ns = match value {
        MetricValue::StartTimestamp(t) | MetricValue::EndTimestamp(t) => {
            t.value().and_then(|d| d.timestamp_nanos_opt())
        }
        _ => None,
    };
    let is_timestamp = matches!(
        value,
        MetricValue::StartTimestamp(_) | MetricValue::EndTimestamp(_)
    );
    MetricRow {
        name: value.name().to_string(),
        value: (!is_timestamp).then(|| value.as_usize()),
        timestamp_ns,
        partition: metric.partition(),
        labels: metric
            .labels()
            .iter()
            .map(|l| (l.name().to_string(), l.value().to_string()))
            .collect(),
    }
}
