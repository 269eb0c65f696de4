//! Failures that name a worker, kept typed from where they happen to where Python sees them.
use std::fmt;

use datafusion::error::DataFusionError;

/// A failure that names a worker: surfaces in Python as `WorkerError`.
#[derive(Debug)]
pub struct WorkerFailure(pub String);

impl fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WorkerFailure {}

pub fn worker_failure(msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(WorkerFailure(msg)))
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
    match err.find_root() {
        DataFusionError::External(e) => {
            e.is::<tonic::Status>() || e.is::<tonic::transport::Error>() || e.is::<std::io::Error>()
        }
        _ => false,
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
        return worker_failure(format!("worker {worker} failed: {err}"));
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
            as_worker_failure(&wrapped).map(|f| f.0.as_str()),
            Some("worker http://h:1 died")
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
