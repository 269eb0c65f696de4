//! Why a connection to a worker failed, in plain words, classified from the error's sources.
//!
//! tonic nests the reason several errors deep (`transport error` → hyper → h2 or the TLS
//! stream → the OS), and its own text says only "transport error". The chain is walked for
//! the types that say what happened: the OS's `io::ErrorKind`, rustls's certificate and
//! message errors, h2's protocol reasons, hyper's cancelled requests. When two ends disagree
//! about TLS, the failure's kind gives a hint of what to set where.
use std::error::Error;
use std::io;

use datafusion::common::DataFusionError;
use url::Url;

use super::urls::display_url;
use crate::errors::{worker_lost, FailureKind};

/// Who opens the channels: errors say which side did not trust whom, and what to set there.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub enum Side {
    #[default]
    Coordinator,
    /// A worker, pulling from other workers (shuffles, broadcasts).
    Worker,
}

/// What went wrong with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Refused,
    Reset,
    /// Closed by the other end before it answered, or an HTTP/2 preface it could not read: a
    /// TLS server spoken to in plain HTTP/2 answers either way.
    Closed,
    TimedOut,
    NoRoute,
    NoSuchHost,
    /// TLS spoken to a server that answered in plain HTTP/2.
    NotTls,
    /// The server's certificate is not signed by a CA this side trusts.
    UntrustedCertificate,
    /// None of the above: the error's own text is shown.
    Other,
}

impl Cause {
    fn words(self) -> &'static str {
        match self {
            Cause::Refused => "connection refused",
            Cause::Reset => "connection reset",
            Cause::Closed => "connection closed",
            Cause::TimedOut => "connection timed out",
            Cause::NoRoute => "no route to its host",
            Cause::NoSuchHost => "its host name does not resolve",
            Cause::NotTls => "it answered TLS in plain HTTP/2",
            Cause::UntrustedCertificate => "its certificate is not trusted",
            Cause::Other => "",
        }
    }
}

/// The first source of `err` that says what happened.
pub fn classify(err: &(dyn Error + 'static)) -> Cause {
    let mut next: Option<&(dyn Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(cause) = said_by(e) {
            return cause;
        }
        // `io::Error::source` skips the error it wraps (a TLS stream's rustls error).
        next = match e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => e.source(),
        };
    }
    Cause::Other
}

fn said_by(e: &(dyn Error + 'static)) -> Option<Cause> {
    if let Some(io) = e.downcast_ref::<io::Error>() {
        if let Some(said) = io.get_ref().and_then(|inner| said_by(inner)) {
            return Some(said);
        }
        use io::ErrorKind::*;
        return match io.kind() {
            ConnectionRefused => Some(Cause::Refused),
            ConnectionReset | ConnectionAborted => Some(Cause::Reset),
            BrokenPipe | UnexpectedEof | NotConnected => Some(Cause::Closed),
            TimedOut => Some(Cause::TimedOut),
            HostUnreachable | NetworkUnreachable | NetworkDown => Some(Cause::NoRoute),
            _ => None,
        };
    }
    if let Some(h2) = e.downcast_ref::<h2::Error>() {
        if let Some(io) = h2.get_io() {
            return said_by(io);
        }
        return match h2.reason() {
            Some(h2::Reason::FRAME_SIZE_ERROR | h2::Reason::PROTOCOL_ERROR) => Some(Cause::Closed),
            _ => None,
        };
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return match tls {
            rustls::Error::InvalidMessage(_) => Some(Cause::NotTls),
            rustls::Error::InvalidCertificate(_) => Some(Cause::UntrustedCertificate),
            _ => None,
        };
    }
    // A request hyper cancelled is one the connection closed under (or was never ready for)
    // before it was sent: what a TLS worker spoken to in plain HTTP/2 gives. tonic passes it
    // on as a status with this error as its source, or as a bare `Cancelled` status.
    if let Some(hyper) = e.downcast_ref::<hyper::Error>() {
        return (hyper.is_canceled() || hyper.is_closed() || hyper.is_incomplete_message())
            .then_some(Cause::Closed);
    }
    if let Some(status) = e.downcast_ref::<tonic::Status>() {
        return match (status.code(), status.source()) {
            (tonic::Code::Cancelled, None) => Some(Cause::Closed),
            _ => None,
        };
    }
    if e.is::<tokio::time::error::Elapsed>() || e.is::<tower::timeout::error::Elapsed>() {
        return Some(Cause::TimedOut);
    }
    None
}

/// `url`'s worker cannot be reached from `side` because of `err`, with a hint when the two
/// ends disagree about TLS.
pub async fn unreachable_from(
    side: Side,
    url: &Url,
    err: &(dyn Error + Send + Sync + 'static),
) -> DataFusionError {
    let mut cause = classify(err);
    if cause == Cause::Other && !resolves(url).await {
        cause = Cause::NoSuchHost;
    }
    let what = match cause {
        Cause::Other => with_causes(err),
        known => known.words().to_string(),
    };
    worker_lost(
        display_url(url),
        FailureKind::Unreachable,
        format!("is unreachable ({what}){}", tls_hint(side, url, cause)),
    )
}

/// `url`'s worker cannot be reached from the coordinator because of `err`.
pub async fn unreachable(url: &Url, err: &DataFusionError) -> DataFusionError {
    unreachable_from(Side::Coordinator, url, err.find_root()).await
}

/// Whether `url`'s host has an address (asked only once a connection failed for no reason
/// its errors name: the resolver's own error carries no kind).
async fn resolves(url: &Url) -> bool {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return false;
    };
    tokio::net::lookup_host((host.trim_matches(['[', ']']), port))
        .await
        .is_ok_and(|mut addrs| addrs.next().is_some())
}

/// What a failed connection most likely means when the two ends disagree about TLS.
fn tls_hint(side: Side, url: &Url, cause: Cause) -> String {
    let https = url.scheme() == "https";
    let (who, give_security) = match side {
        Side::Coordinator => ("the coordinator", "give the coordinator's Security"),
        Side::Worker => (
            "this worker",
            "start this worker with the cluster's settings (--tls-ca, --tls-cert/--tls-key, or \
             DFDPY_TLS_*_FILE; Worker(security=...))",
        ),
    };
    match (https, cause) {
        (false, Cause::Closed) => {
            format!(" (does the worker serve TLS? then address it as https:// and {give_security})")
        }
        (true, Cause::NotTls) => " (the worker does not serve TLS: address it as http://)".into(),
        (true, Cause::UntrustedCertificate) => {
            let fix = match side {
                Side::Coordinator => {
                    "give the coordinator's Security(tls_ca=...) the cluster's CA, and \
                     server_name= if workers are addressed by IP"
                }
                Side::Worker => {
                    "start this worker with --tls-ca (Security(tls_ca=...), DFDPY_TLS_CA_FILE) \
                     naming the cluster's CA, and --tls-server-name if workers are addressed \
                     by IP"
                }
            };
            format!(" (its certificate is not signed by a CA {who} trusts: {fix})")
        }
        _ => String::new(),
    }
}

/// `e: cause: cause...` for a failure none of the known kinds describes.
fn with_causes(e: &(dyn Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        // Wrappers often repeat their cause's text.
        if !text.ends_with(&said) {
            text.push_str(&format!(": {said}"));
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::as_worker_failure;

    fn shown(err: &DataFusionError) -> String {
        as_worker_failure(err).unwrap().to_string()
    }

    #[tokio::test]
    async fn a_closed_port_is_a_refused_connection() {
        let url = Url::parse("http://127.0.0.1:1").unwrap();
        let err = tonic::transport::Endpoint::from_shared(url.to_string())
            .unwrap()
            .connect()
            .await
            .unwrap_err();
        assert_eq!(classify(&err), Cause::Refused);
        let text = shown(&unreachable_from(Side::Coordinator, &url, &err).await);
        assert_eq!(
            text,
            "worker http://127.0.0.1:1 is unreachable (connection refused)"
        );
    }

    #[tokio::test]
    async fn a_wrapped_os_error_is_found_and_said_in_plain_words() {
        // As hyper wraps what a worker killed a moment before the probe gave.
        let io = io::Error::new(io::ErrorKind::BrokenPipe, "stream closed");
        let err = DataFusionError::External(Box::new(io::Error::other(io)));
        let url = Url::parse("http://127.0.0.1:1").unwrap();
        let text = shown(&unreachable(&url, &err).await);
        assert!(text.starts_with("worker http://127.0.0.1:1 is unreachable (connection closed)"));
        // Plain HTTP/2 to a TLS server: the hint says what to change.
        assert!(text.contains("does the worker serve TLS?"), "{text}");
    }

    #[tokio::test]
    async fn a_request_cancelled_by_a_closing_connection_is_a_closed_connection() {
        // What tonic makes of hyper's "operation was canceled: connection closed": a status
        // with the code and text only, as a TLS worker spoken to in plain HTTP/2 can give.
        let status = tonic::Status::cancelled("operation was canceled: connection closed");
        let err = DataFusionError::External(Box::new(status));
        let url = Url::parse("http://127.0.0.1:1").unwrap();
        let text = shown(&unreachable(&url, &err).await);
        assert!(
            text.contains("is unreachable (connection closed)"),
            "{text}"
        );
        assert!(text.contains("address it as https://"), "{text}");
    }

    #[tokio::test]
    async fn a_host_that_does_not_resolve_is_named_so() {
        let url = Url::parse("http://no-such-host.invalid:50051").unwrap();
        let err = DataFusionError::Execution("connect failed".into());
        let text = shown(&unreachable(&url, &err).await);
        assert!(
            text.ends_with("is unreachable (its host name does not resolve)"),
            "{text}"
        );
    }
}
