//! Failures that name a worker, kept typed from where they happen to where Python sees them.
use std::fmt;

use datafusion::error::DataFusionError;

/// What happened to a worker, as data: the message is built from it and never read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// It died mid-query: its connections were reset or closed.
    Died,
    /// It stopped answering without closing its connections (frozen, cut off the network).
    StoppedAnswering,
    /// It cannot be reached: connection refused, no route, unknown host, TLS mismatch.
    Unreachable,
    /// It lost its connection to another worker (shuffles, broadcasts), which it names.
    LostPeer,
    /// It refused this coordinator's credentials (a missing or wrong token).
    RejectedCredentials,
    /// It runs another release of this package.
    VersionMismatch,
    /// It is unfit for the query otherwise (its settings, or too few workers left).
    Refused,
    /// The query waited on it (and every other worker of the run) while nothing moved, for
    /// longer than `DistributedConfig.stall_timeout` (see `coordinator::stall_guard`).
    Stalled,
}

impl FailureKind {
    /// The worker is lost (died, froze, unreachable): the query may run again without it.
    /// A worker that refuses us does not heal by retrying.
    pub fn is_lost(self) -> bool {
        matches!(
            self,
            Self::Died | Self::StoppedAnswering | Self::Unreachable | Self::LostPeer
        )
    }

    /// The kind `name` names (as [`FailureKind::name`] gives it).
    pub fn named(name: &str) -> Option<Self> {
        [
            Self::Died,
            Self::StoppedAnswering,
            Self::Unreachable,
            Self::LostPeer,
            Self::RejectedCredentials,
            Self::VersionMismatch,
            Self::Refused,
            Self::Stalled,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }

    /// As Python's `WorkerError.kind` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Died => "died",
            Self::StoppedAnswering => "stopped_answering",
            Self::Unreachable => "unreachable",
            Self::LostPeer => "lost_peer",
            Self::RejectedCredentials => "rejected_credentials",
            Self::VersionMismatch => "version_mismatch",
            Self::Refused => "refused",
            Self::Stalled => "stalled",
        }
    }
}

/// A failure that names a worker: surfaces in Python as `WorkerError` (`.worker_url`,
/// `.kind`).
#[derive(Debug)]
pub struct WorkerFailure {
    pub worker: Option<String>,
    pub kind: FailureKind,
    /// What happened, after `worker <url> ` (e.g. `died (connection reset)`).
    pub what: String,
}

impl WorkerFailure {
    pub fn lost(&self) -> bool {
        self.kind.is_lost()
    }
}

impl fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.worker {
            Some(worker) => write!(f, "worker {worker} {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for WorkerFailure {}

/// `worker` (None: the worker set as a whole) failed as `kind`: `what` reads after its URL.
pub fn worker_failure(worker: Option<&str>, kind: FailureKind, what: String) -> DataFusionError {
    DataFusionError::External(Box::new(WorkerFailure {
        worker: worker.map(str::to_string),
        kind,
        what,
    }))
}

/// A worker that died, froze or cannot be reached: `worker <url> <what happened>`.
pub fn worker_lost(worker: &str, kind: FailureKind, what: String) -> DataFusionError {
    debug_assert!(kind.is_lost());
    worker_failure(Some(worker), kind, what)
}

/// How a worker reports that it lost another worker. Its errors reach the coordinator
/// through datafusion-distributed's error encoding, which keeps a `DataFusionError`'s variants
/// and context but turns foreign errors into their text. So the worker that lost a peer
/// (`protocol::PeerChannel`) wraps the failure in a context of this exact label, which the
/// coordinator compares whole: the kind travels as structure, the text only as what to show.
///
/// Upstream: datafusion-distributed 4.0.0 `protocol/grpc/errors/datafusion_error.rs`
/// (`External` encoded as a string).
const LOST_PEER: &str = "dfdpy.lost-peer";

/// `err`, a worker's failure to reach or read the peer `peer`, in the form that crosses the
/// network to the coordinator: a query error (its own or another worker's) stays as it is.
pub fn as_lost_peer(peer: &str, err: DataFusionError) -> DataFusionError {
    if lost_peer_said(&err).is_some() || !(is_transport(&err) || is_worker_failure(&err)) {
        return err;
    }
    let failure = match as_worker_failure(&err) {
        Some(failure) => failure.to_string(),
        None => {
            let (_, what) = what_happened(err.find_root());
            format!("worker {peer} {what}")
        }
    };
    DataFusionError::Context(
        LOST_PEER.into(),
        Box::new(DataFusionError::Execution(failure)),
    )
}

/// What a worker said of the peer it lost, if `err` carries that report.
fn lost_peer_said(err: &DataFusionError) -> Option<&str> {
    match err {
        DataFusionError::Context(label, inner) if label == LOST_PEER => match inner.as_ref() {
            DataFusionError::Execution(said) => Some(said),
            _ => None,
        },
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            lost_peer_said(inner)
        }
        DataFusionError::Shared(inner) => lost_peer_said(inner),
        DataFusionError::External(e) => {
            e.downcast_ref::<DataFusionError>().and_then(lost_peer_said)
        }
        DataFusionError::ArrowError(a, _) => match a.as_ref() {
            datafusion::arrow::error::ArrowError::ExternalError(e) => {
                e.downcast_ref::<DataFusionError>().and_then(lost_peer_said)
            }
            _ => None,
        },
        _ => None,
    }
}

/// Whether `err` is a worker lost (died, froze, unreachable): what a retry may get past.
pub fn is_worker_lost(err: &DataFusionError) -> bool {
    as_worker_failure(err).is_some_and(WorkerFailure::lost)
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
    use arrow_flight::error::FlightError;
    external(err).is_some_and(|e| match e.downcast_ref::<FlightError>() {
        // Batches that arrived but do not read as the stream's schema (a type the plan's
        // encoding changed) are the query's own error, not a broken connection.
        Some(
            FlightError::Arrow(_) | FlightError::DecodeError(_) | FlightError::ProtocolError(_),
        ) => false,
        Some(_) => true,
        None => {
            e.is::<tonic::Status>() || e.is::<tonic::transport::Error>() || e.is::<std::io::Error>()
        }
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

/// What a broken connection to a worker means: classified from the error's sources (the OS's
/// error kind, the gRPC status code), and said in plain words.
fn what_happened(root: &DataFusionError) -> (FailureKind, String) {
    let Some(e) = external(root) else {
        return (FailureKind::Died, format!("failed ({root})"));
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return match io.kind() {
                ConnectionRefused => (
                    FailureKind::Unreachable,
                    "is unreachable (connection refused)".into(),
                ),
                TimedOut => (
                    FailureKind::StoppedAnswering,
                    "stopped answering (timed out)".into(),
                ),
                _ => (FailureKind::Died, "died (connection reset)".into()),
            };
        }
        cause = c.source();
    }
    let status = e.downcast_ref::<tonic::Status>().or_else(|| match e
        .downcast_ref::<arrow_flight::error::FlightError>(
    ) {
        Some(arrow_flight::error::FlightError::Tonic(s)) => Some(s.as_ref()),
        _ => None,
    });
    match status.map(tonic::Status::code) {
        Some(tonic::Code::DeadlineExceeded) => (
            FailureKind::StoppedAnswering,
            "stopped answering (deadline exceeded)".into(),
        ),
        // Unavailable, Cancelled, Unknown: the connection broke under the stream. Whether the
        // worker died or froze is told by asking it again (`Query::name_lost_peer`).
        Some(_) | None => (FailureKind::Died, "died (connection reset)".into()),
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
        return worker_failure(
            Some(worker),
            FailureKind::RejectedCredentials,
            "rejected this coordinator's credentials (a missing or wrong token): give this \
             DistributedContext the cluster's Security"
                .into(),
        );
    }
    if is_transport(&err) {
        let (kind, what) = what_happened(err.find_root());
        return worker_lost(worker, kind, what);
    }
    if let Some(said) = lost_peer_said(&err) {
        // The worker's own words say which peer and why (and, for TLS, what to set where).
        return worker_lost(
            worker,
            FailureKind::LostPeer,
            format!("lost its connection to another worker: {said}"),
        );
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
        let err = worker_failure(Some("http://h:1"), FailureKind::Refused, "is unfit".into());
        let wrapped = DataFusionError::Context("running stage".into(), Box::new(err));
        let found = as_worker_failure(&wrapped).unwrap();
        assert_eq!(found.to_string(), "worker http://h:1 is unfit");
        assert_eq!(found.kind, FailureKind::Refused);
        assert!(!is_worker_lost(&wrapped));
        let lost = worker_lost(
            "http://h:1",
            FailureKind::Died,
            "died (connection reset)".into(),
        );
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
        let failure = as_worker_failure(&named).unwrap();
        assert_eq!(failure.kind, FailureKind::RejectedCredentials);
        let text = failure.to_string();
        assert!(text.starts_with("worker http://h:1 rejected this coordinator's credentials"));
        let again = name_worker("http://h:1", named);
        assert_eq!(as_worker_failure(&again).unwrap().to_string(), text);
        let other = DataFusionError::External(Box::new(tonic::Status::internal("boom")));
        assert!(!is_rejected_credentials(&other));
    }

    #[test]
    fn broken_connections_are_classified_by_their_sources() {
        let io = |kind| {
            let status = tonic::Status::from_error(Box::new(std::io::Error::from(kind)));
            as_worker_failure(&name_worker(
                "http://h:1",
                DataFusionError::External(Box::new(status)),
            ))
            .map(|f| f.kind)
        };
        assert_eq!(
            io(std::io::ErrorKind::ConnectionRefused),
            Some(FailureKind::Unreachable)
        );
        assert_eq!(
            io(std::io::ErrorKind::ConnectionReset),
            Some(FailureKind::Died)
        );
        assert_eq!(
            io(std::io::ErrorKind::TimedOut),
            Some(FailureKind::StoppedAnswering)
        );
        let deadline = tonic::Status::deadline_exceeded("slow");
        let named = name_worker("http://h:1", DataFusionError::External(Box::new(deadline)));
        assert_eq!(
            as_worker_failure(&named).unwrap().kind,
            FailureKind::StoppedAnswering
        );
    }

    #[test]
    fn a_peer_lost_on_a_worker_reaches_the_coordinator_as_a_lost_peer() {
        // On the worker: its connection to the peer reset under a shuffle's stream.
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let on_worker = as_lost_peer(
            "http://b:2",
            DataFusionError::External(Box::new(tonic::Status::from_error(Box::new(reset)))),
        );
        // As datafusion-distributed's error encoding gives it back (context and variants
        // kept), under the coordinator's own wrappers.
        let DataFusionError::Context(label, inner) = &on_worker else {
            panic!("{on_worker}");
        };
        let DataFusionError::Execution(said) = inner.as_ref() else {
            panic!("{inner}");
        };
        let decoded = DataFusionError::Context(
            label.clone(),
            Box::new(DataFusionError::Execution(said.clone())),
        );
        let received = DataFusionError::Shared(std::sync::Arc::new(decoded));
        let named = name_worker("http://a:1", received);
        let failure = as_worker_failure(&named).unwrap();
        assert_eq!(failure.kind, FailureKind::LostPeer);
        assert_eq!(
            failure.to_string(),
            "worker http://a:1 lost its connection to another worker: worker http://b:2 died \
             (connection reset)"
        );
        // An error of the query raised on the peer stays the query's error.
        let query_error = DataFusionError::Execution("Divide by zero error".into());
        let kept = as_lost_peer("http://b:2", query_error);
        assert_eq!(kept.to_string(), "Execution error: Divide by zero error");
    }
}
