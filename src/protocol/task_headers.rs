//! What travels with each task request besides its plan: the task's key, for the worker's
//! own event log, and its place in an OpenTelemetry trace, carried both ways.
//!
//! The coordinator sends the W3C `traceparent` of the query's span as a header of each task
//! request; the worker times the task under it, in its own process, and reports the span back
//! among the task's root metrics: a start and an end timestamp labelled [`SPAN_LABEL`] with the
//! trace context, the worker's pid and host. The coordinator reads them into its task records;
//! Python exports them with the SDK the user configured, so a worker needs no collector.
use std::sync::Arc;

use datafusion::physical_plan::metrics::{Label, Metric, MetricValue, MetricsSet, Timestamp};
use http::{HeaderMap, HeaderValue};

/// The W3C trace-context header.
pub const TRACEPARENT: &str = "traceparent";
/// Marks the two timestamps of a task's span among its root's metrics.
pub const SPAN_LABEL: &str = "dfdpy.span";

/// The header naming a task: `<query id>/<stage>/<task>/<tasks in stage>`.
pub const TASK_KEY: &str = "dfdpy-task";

/// Which task a request runs (a session extension on the worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskKey {
    pub query_id: String,
    pub stage: usize,
    pub task: usize,
    pub tasks: usize,
}

impl TaskKey {
    pub fn add_to(&self, headers: &mut HeaderMap) {
        let value = format!(
            "{}/{}/{}/{}",
            self.query_id, self.stage, self.task, self.tasks
        );
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(TASK_KEY, value);
        }
    }

    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let value = headers.get(TASK_KEY)?.to_str().ok()?;
        let parts: Vec<&str> = value.split('/').collect();
        let [query_id, stage, task, tasks] = parts.as_slice() else {
            return None;
        };
        Some(Self {
            query_id: query_id.to_string(),
            stage: stage.parse().ok()?,
            task: task.parse().ok()?,
            tasks: tasks.parse().ok()?,
        })
    }
}

/// The trace context a task runs under (a session extension on the worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTrace {
    pub traceparent: String,
}

impl TaskTrace {
    /// `traceparent` if it is a W3C trace context (`00-<32 hex>-<16 hex>-<2 hex>`).
    pub fn parse(traceparent: &str) -> Option<Self> {
        let parts: Vec<&str> = traceparent.split('-').collect();
        let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
        match parts.as_slice() {
            [v, trace, span, flags]
                if hex(v, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2) =>
            {
                Some(Self {
                    traceparent: traceparent.to_ascii_lowercase(),
                })
            }
            _ => None,
        }
    }

    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        Self::parse(headers.get(TRACEPARENT)?.to_str().ok()?)
    }

    pub fn add_to(&self, headers: &mut HeaderMap) {
        if let Ok(value) = HeaderValue::from_str(&self.traceparent) {
            headers.insert(TRACEPARENT, value);
        }
    }
}

/// A task's span as its worker measured it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpan {
    /// The `traceparent` the worker received.
    pub traceparent: String,
    /// Unix nanoseconds on the worker's clock.
    pub start_ns: i64,
    pub end_ns: i64,
    pub pid: u32,
    pub host: String,
}

/// The two timestamps a worker keeps for one task (shared by its partitions).
#[derive(Debug)]
pub struct SpanMetrics {
    start: Timestamp,
    end: Timestamp,
    labels: Vec<Label>,
}

impl SpanMetrics {
    /// Starts timing now.
    pub fn start(trace: &TaskTrace) -> Self {
        let start = Timestamp::new();
        start.record();
        let labels = vec![
            Label::new(SPAN_LABEL, trace.traceparent.clone()),
            Label::new("pid", std::process::id().to_string()),
            Label::new("host", host_name()),
        ];
        Self {
            start,
            end: Timestamp::new(),
            labels,
        }
    }

    /// One of the task's partitions ended: the span ends with the last.
    pub fn partition_ended(&self) {
        let now = Timestamp::new();
        now.record();
        self.end.update_to_max(&now);
    }

    /// Adds the span's timestamps to `metrics` (the task's root's).
    pub fn add_to(&self, metrics: &mut MetricsSet) {
        let end = self.end.clone();
        if end.value().is_none() {
            end.record(); // read while running: the span so far
        }
        for value in [
            MetricValue::StartTimestamp(self.start.clone()),
            MetricValue::EndTimestamp(end),
        ] {
            metrics.push(Arc::new(Metric::new_with_labels(
                value,
                None,
                self.labels.clone(),
            )));
        }
    }
}

/// The span a worker reported among a task's root metrics, if it reported one.
pub fn read_span(metrics: &MetricsSet) -> Option<WorkerSpan> {
    let (mut start, mut end, mut labels) = (None, None, None);
    for m in metrics.iter() {
        if !m.labels().iter().any(|l| l.name() == SPAN_LABEL) {
            continue;
        }
        match m.value() {
            MetricValue::StartTimestamp(t) => start = t.value(),
            MetricValue::EndTimestamp(t) => end = t.value(),
            _ => continue,
        }
        labels = Some(m.labels());
    }
    let label = |name: &str| {
        labels?
            .iter()
            .find(|l| l.name() == name)
            .map(|l| l.value().to_string())
    };
    Some(WorkerSpan {
        traceparent: label(SPAN_LABEL)?,
        start_ns: start?.timestamp_nanos_opt()?,
        end_ns: end?.timestamp_nanos_opt()?,
        pid: label("pid")?.parse().ok()?,
        host: label("host").unwrap_or_default(),
    })
}

/// Whether `metric` is one of a span's timestamps (left out where operators' metrics are
/// listed: they describe the task, not the operator).
pub fn is_span_metric(metric: &Metric) -> bool {
    metric.labels().iter().any(|l| l.name() == SPAN_LABEL)
}

/// This machine's name (for spans), read once per process: a traced task must not read a
/// file to start.
fn host_name() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_default()
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn only_a_w3c_trace_context_is_taken() {
        assert!(TaskTrace::parse(PARENT).is_some());
        assert!(TaskTrace::parse("00-short-b7ad6b7169203331-01").is_none());
        assert!(TaskTrace::parse("not a header").is_none());
        let mut headers = HeaderMap::new();
        TaskTrace::parse(PARENT).unwrap().add_to(&mut headers);
        assert_eq!(
            TaskTrace::from_headers(&headers).unwrap().traceparent,
            PARENT
        );
    }

    #[test]
    fn a_task_key_reads_back_from_its_header() {
        let key = TaskKey {
            query_id: "6f1c".into(),
            stage: 2,
            task: 1,
            tasks: 3,
        };
        let mut headers = HeaderMap::new();
        key.add_to(&mut headers);
        assert_eq!(TaskKey::from_headers(&headers), Some(key));
        assert_eq!(TaskKey::from_headers(&HeaderMap::new()), None);
    }

    #[test]
    fn a_span_reads_back_from_the_metrics_it_was_added_to() {
        let trace = TaskTrace::parse(PARENT).unwrap();
        let span = SpanMetrics::start(&trace);
        span.partition_ended();
        let mut metrics = MetricsSet::new();
        span.add_to(&mut metrics);
        let read = read_span(&metrics).expect("a span");
        assert_eq!(read.traceparent, PARENT);
        assert_eq!(read.pid, std::process::id());
        assert!(read.start_ns <= read.end_ns && read.start_ns > 0);
        assert!(metrics.iter().all(|m| is_span_metric(m)));
        assert!(read_span(&MetricsSet::new()).is_none());
    }
}
