//! Failures that name a worker, kept typed from where they happen to where Python sees them.
use std::fmt;

use datafusion::error::DataFusionError;

/// A failure that names a worker: surfaces in Python as `WorkerError` (`.worker_url`).
#[derive(Debug)]
pub struct WorkerFailure {
    /// Starts with `worker <url>`.
    pub message: String,
    pub worker: Option<String>,
    /// The worker died, froze or cannot be reached (as opposed to refusing us: credentials,
    /// version, TLS settings): the query may be re-planned on the others.
    pub lost: bool,
}

impl fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WorkerFailure {}

/// A worker refusing or unfit for the query (`msg` starts with `worker <url>`).
pub fn worker_failure(msg: String) -> DataFusionError {
    let worker = msg
        .strip_prefix("worker ")
        .and_then(|rest| rest.split_whitespace().next())
        .map(|url| url.trim_end_matches(':').to_string());
    DataFusionError::External(Box::new(WorkerFailure {
        message: msg,
        worker,
        lost: false,
    }))
}

/// A worker that died, froze or cannot be reached: `worker <url> <what happened>`.
pub fn worker_lost(worker: &str, what: String) -> DataFusionError {
    DataFusionError::External(Box::new(WorkerFailure {
        message: format!("worker {worker} {what}"),
        worker: Some(worker.to_string()),
        lost: true,
    }))
}

/// Words of a broken connection, as a worker reports them in text (its error crossed the
/// network as a string).
const BROKEN_CONNECTION: &[&str] = &[
    "h2 protocol error",
    "transport error",
    "error trying to connect",
    "Connection refused",
    "connection reset",
    "Connection reset",
    "broken pipe",
    "keep-alive",
    "connection closed",
    "tonic::transport::Error",
];

/// Whether `err` is a worker lost (died, froze, unreachable): what a retry may get past.
pub fn is_worker_lost(err: &DataFusionError) -> bool {
    as_worker_failure(err).is_some_and(|f| f.lost)
}

/// A plan that cannot be distributed without changing its answer: surfaces in Python as
/// `UnsupportedPlanError`, on which `DistributedContext` runs the query single-node instead.
#[derive(Debug)]
pub struct NotDistributable(pub String);

impl fmt::Display for NotDistributable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotDistributable {}

pub fn not_distributable(msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(NotDistributable(msg)))
}

/// Why the plan cannot be distributed, if that is what `err` is at its root.
pub fn as_not_distributable(err: &DataFusionError) -> Option<&NotDistributable> {
    match err.find_root() {
        DataFusionError::External(e) => e.downcast_ref::<NotDistributable>(),
        _ => None,
    }
}

/// The worker failure at the root of `err`, if that is what it is.
pub fn as_worker_failure(err: &DataFusionError) -> Option<&WorkerFailure> {
    match err.find_root() {
        DataFusionError::External(e) => e.downcast_ref::<WorkerFailure>(),
        _ => None,
    }
}

/// Whether `err` is, at its root, a failure that names a worker.
pub fn is_worker_failure(err: &DataFusionError) -> bool {
    as_worker_failure(err).is_some()
}

/// Whether `err` is, at its root, a worker refusing our credentials (token).
pub fn is_rejected_credentials(err: &DataFusionError) -> bool {
    match err.find_root() {
        DataFusionError::External(e) => e
            .downcast_ref::<tonic::Status>()
            .is_some_and(|s| s.code() == tonic::Code::Unauthenticated),
        _ => false,
    }
}

/// An error of the query itself (a bad cast, a UDF's exception) raised on a worker: shown as
/// the error single-node would give, the worker appended.
#[derive(Debug)]
pub struct RaisedOnWorker {
    pub worker: String,
    pub err: DataFusionError,
}

impl fmt::Display for RaisedOnWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (on worker {})", self.err, self.worker)
    }
}

impl std::error::Error for RaisedOnWorker {}

/// Whether `err` is the connection to a worker failing (as opposed to an error of the query,
/// which a worker sends back encoded and the crate decodes to its own kind).
fn is_transport(err: &DataFusionError) -> bool {
    external(err).is_some_and(|e| {
        e.is::<tonic::Status>()
            || e.is::<arrow_flight::error::FlightError>()
            || e.is::<tonic::transport::Error>()
            || e.is::<std::io::Error>()
    })
}

type External = dyn std::error::Error + Send + Sync + 'static;

/// The foreign error at the root of `err` (streams wrap it in Arrow's `ExternalError`).
fn external(err: &DataFusionError) -> Option<&External> {
    match err.find_root() {
        DataFusionError::External(e) => Some(e.as_ref()),
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            datafusion::arrow::error::ArrowError::ExternalError(e) => Some(e.as_ref()),
            _ => None,
        },
        _ => None,
    }
}

/// What a broken connection to a worker means, in plain words (tonic and h2 say it many
/// ways; their text is all there is).
fn what_happened(root: &DataFusionError) -> String {
    let text = root.to_string();
    let said = |words: &[&str]| words.iter().any(|w| text.contains(w));
    let status = external(root).and_then(|e| {
        e.downcast_ref::<tonic::Status>().or_else(|| {
            match e.downcast_ref::<arrow_flight::error::FlightError>() {
                Some(arrow_flight::error::FlightError::Tonic(s)) => Some(s.as_ref()),
                _ => None,
            }
        })
    });
    if said(&["keep-alive", "keepalive", "KeepAlive"]) {
        "stopped answering (no keep-alive reply for 20 s)".to_string()
    } else if said(&[
        "h2 protocol error",
        "connection reset",
        "Connection reset",
        "error reading a body",
        "broken pipe",
        "BrokenPipe",
        "connection closed",
        "Connection refused",
    ]) {
        "died (connection reset)".to_string()
    } else if status.is_some_and(|s| s.code() == tonic::Code::DeadlineExceeded) {
        "stopped answering (deadline exceeded)".to_string()
    } else if let Some(s) = status {
        format!("failed ({:?}: {})", s.code(), s.message())
    } else {
        format!("failed ({text})")
    }
}

/// `err`, coming from the worker shown as `worker`, naming it (once): a failure of the worker
/// or its connection becomes a `WorkerFailure`, an error of the query stays what it is.
pub fn name_worker(worker: &str, err: DataFusionError) -> DataFusionError {
    if is_worker_failure(&err) {
        return err;
    }
    if let DataFusionError::External(e) = err.find_root() {
        if e.is::<RaisedOnWorker>() || e.is::<NotDistributable>() {
            return err;
        }
    }
    if is_rejected_credentials(&err) {
        return worker_failure(format!(
            "worker {worker} rejected this coordinator's credentials (a missing or wrong \
             token): give this DistributedContext the cluster's Security"
        ));
    }
    if is_transport(&err) {
        return worker_lost(worker, what_happened(err.find_root()));
    }
    let text = err.find_root().to_string();
    if BROKEN_CONNECTION.iter().any(|w| text.contains(w)) {
        let what = what_happened(err.find_root());
        return DataFusionError::External(Box::new(WorkerFailure {
            message: format!("worker {worker} lost its connection to another worker, which {what}"),
            worker: Some(worker.to_string()),
            lost: true,
        }));
    }
    DataFusionError::External(Box::new(RaisedOnWorker {
        worker: worker.to_string(),
        err,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_worker_failures_are_found() {
        let err = worker_failure("worker http://h:1 died".into());
        let wrapped = DataFusionError::Context("running stage".into(), Box::new(err));
        assert_eq!(
            as_worker_failure(&wrapped).map(|f| f.message.as_str()),
            Some("worker http://h:1 died")
        );
        assert!(!is_worker_lost(&wrapped));
        let lost = worker_lost("http://h:1", "died (connection reset)".into());
        assert!(is_worker_lost(&lost));
        assert_eq!(
            as_worker_failure(&lost).unwrap().worker.as_deref(),
            Some("http://h:1")
        );
        assert!(!is_worker_failure(&DataFusionError::Plan("no".into())));
    }

    #[test]
    fn a_refused_token_reads_as_such_and_never_twice_named() {
        let refused = DataFusionError::External(Box::new(tonic::Status::unauthenticated("no")));
        assert!(is_rejected_credentials(&refused));
        let named = name_worker("http://h:1", refused);
        let text = as_worker_failure(&named).unwrap().to_string();
        assert!(text.starts_with("worker http://h:1 rejected this coordinator's credentials"));
        let again = name_worker("http://h:1", named);
        assert_eq!(as_worker_failure(&again).unwrap().to_string(), text);
        let other = DataFusionError::External(Box::new(tonic::Status::internal("boom")));
        assert!(!is_rejected_credentials(&other));
    }
}
