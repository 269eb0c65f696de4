//! gRPC channels to worker processes, one per URL and reused across queries.
//!
//! The crate's default channels have no keep-alive, no token and no TLS. Ours ping over HTTP/2
//! (a worker that stops answering without closing its socket — frozen, SIGSTOPped, cut off by
//! the network — fails the query instead of hanging it), send the [`Security`] token on every
//! request, and speak TLS to `https://` workers.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion_distributed::grpc::{create_worker_client, BoxCloneSyncChannel};
use datafusion_distributed::{ChannelResolver, WorkerChannel};
use tonic::transport::{Channel, Endpoint};
use url::Url;

use super::urls::display_url;
use crate::errors::{worker_failure, worker_lost, FailureKind};
use crate::security::Security;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A ping every 5 s, answered within 20 s: a silent worker fails its queries within 25 s,
/// while a worker whose threads are busy still has ample time to answer.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Who opens the channels: errors say which side did not trust whom, and what to set there.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub enum Side {
    #[default]
    Coordinator,
    /// A worker, pulling from other workers (shuffles, broadcasts).
    Worker,
}

#[derive(Clone, Default)]
pub struct WorkerChannels {
    open: Arc<Mutex<HashMap<Url, Channel>>>,
    security: Arc<Security>,
    side: Side,
}

impl WorkerChannels {
    pub fn new(security: Security) -> Self {
        Self {
            open: Arc::default(),
            security: Arc::new(security),
            side: Side::Coordinator,
        }
    }

    /// These channels, opened by a worker to other workers.
    pub fn on_a_worker(mut self) -> Self {
        self.side = Side::Worker;
        self
    }

    /// The largest message workers of these settings accept.
    pub fn max_message_bytes(&self) -> usize {
        self.security.max_message_bytes
    }

    /// The channel to `url`, opened on first use (with keep-alive and, for `https://`, TLS).
    pub async fn channel(&self, url: &Url) -> Result<Channel> {
        if let Some(channel) = self.open.lock().expect("poisoned").get(url) {
            return Ok(channel.clone());
        }
        let channel = self.connect(url).await?;
        // A channel reconnects by itself after a failure, so it is kept even then.
        let mut open = self.open.lock().expect("poisoned");
        Ok(open.entry(url.clone()).or_insert(channel).clone())
    }

    /// A new connection to `url`, not kept.
    async fn connect(&self, url: &Url) -> Result<Channel> {
        let side = self.side;
        let unreachable =
            |e: tonic::transport::Error| unreachable_from(side, url, &with_causes(&e));
        #[allow(unused_mut)]
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(unreachable)?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if url.scheme() == "https" {
            #[cfg(feature = "tls")]
            {
                let tls = self.security.tls.clone().unwrap_or_default();
                endpoint = endpoint
                    .tls_config(tls.client_config())
                    .map_err(unreachable)?;
            }
            #[cfg(not(feature = "tls"))]
            return Err(worker_failure(
                Some(display_url(url)),
                FailureKind::Refused,
                "is addressed with https://, but this build of datafusion-distributed-py has no \
                 TLS support"
                    .into(),
            ));
        } else if self.security.tls.is_some() {
            return Err(worker_failure(
                Some(display_url(url)),
                FailureKind::Refused,
                format!(
                    "is addressed with http://, but this side is configured for TLS: use \
                     https://{}",
                    display_url(url).trim_start_matches("http://")
                ),
            ));
        }
        endpoint.connect().await.map_err(unreachable)
    }
}

impl WorkerChannels {
    /// The channel to `url`, with the token (if any) on every request.
    pub async fn authorized(&self, url: &Url) -> Result<BoxCloneSyncChannel> {
        Ok(self.with_token(self.channel(url).await?))
    }

    /// A client over a new connection to `url`, not kept. Asking whether a worker is lost
    /// must not read a kept channel's answer: after its connection broke, tonic's reconnect
    /// hands out that old failure once, whatever the worker is doing now.
    pub async fn fresh_client(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        Ok(create_worker_client(
            self.with_token(self.connect(url).await?),
        ))
    }

    fn with_token(&self, channel: Channel) -> BoxCloneSyncChannel {
        match &self.security.token {
            None => BoxCloneSyncChannel::new(channel),
            Some(token) => {
                let header = token.header();
                BoxCloneSyncChannel::new(
                    tower::ServiceBuilder::new()
                        .map_request(move |mut request: http::Request<tonic::body::Body>| {
                            request
                                .headers_mut()
                                .insert(http::header::AUTHORIZATION, header.clone());
                            request
                        })
                        .service(channel),
                )
            }
        }
    }
}

#[async_trait]
impl ChannelResolver for WorkerChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        Ok(create_worker_client(self.authorized(url).await?))
    }
}

/// `url`'s worker cannot be reached from the coordinator because of `cause`, with a hint when
/// TLS settings differ.
pub fn unreachable(url: &Url, cause: &str) -> DataFusionError {
    unreachable_from(Side::Coordinator, url, cause)
}

/// `url`'s worker cannot be reached from `side` because of `cause`.
pub fn unreachable_from(side: Side, url: &Url, cause: &str) -> DataFusionError {
    worker_lost(
        display_url(url),
        FailureKind::Unreachable,
        format!(
            "is unreachable ({}){}",
            plain_cause(cause),
            tls_hint(side, url, cause)
        ),
    )
}

/// A connection failure in plain words: tonic and hyper nest the OS's reason in their own.
fn plain_cause(cause: &str) -> String {
    let said = |words: &[&str]| words.iter().any(|w| cause.contains(w));
    if said(&[
        "ConnectionRefused",
        "Connection refused",
        "connection refused",
    ]) {
        "connection refused".into()
    } else if said(&["ConnectionReset", "connection reset", "Connection reset"]) {
        "connection reset".into()
    } else if said(&["BrokenPipe", "broken pipe", "connection closed"]) {
        "connection closed".into()
    } else if said(&["timed out", "TimedOut", "Elapsed", "deadline has elapsed"]) {
        "connection timed out".into()
    } else if said(&["dns error", "failed to lookup", "Name or service not known"]) {
        "its host name does not resolve".into()
    } else if said(&["No route to host", "HostUnreachable", "NetworkUnreachable"]) {
        "no route to its host".into()
    } else {
        cause.to_string()
    }
}

/// What a failed connection most likely means when the two ends disagree about TLS. tonic
/// hands these failures over as opaque transport errors, so their text is all there is.
fn tls_hint(side: Side, url: &Url, cause: &str) -> String {
    let https = url.scheme() == "https";
    let closed_on_preface = [
        "FRAME_SIZE_ERROR",
        "h2 protocol error",
        "BrokenPipe",
        "broken pipe",
        "connection closed",
    ]
    .iter()
    .any(|said| cause.contains(said));
    let (who, give_security) = match side {
        Side::Coordinator => ("the coordinator", "give the coordinator's Security"),
        Side::Worker => (
            "this worker",
            "start this worker with the cluster's settings (--tls-ca, --tls-cert/--tls-key, or \
             DFDPY_TLS_*_FILE; Worker(security=...))",
        ),
    };
    if !https && closed_on_preface {
        format!(" (does the worker serve TLS? then address it as https:// and {give_security})")
    } else if https && (cause.contains("InvalidContentType") || cause.contains("corrupt message")) {
        " (the worker does not serve TLS: address it as http://)".to_string()
    } else if https
        && (cause.contains("UnknownIssuer") || cause.contains("invalid peer certificate"))
    {
        let fix = match side {
            Side::Coordinator => {
                "give the coordinator's Security(tls_ca=...) the cluster's CA, \
                                  and server_name= if workers are addressed by IP"
            }
            Side::Worker => {
                "start this worker with --tls-ca (Security(tls_ca=...), \
                             DFDPY_TLS_CA_FILE) naming the cluster's CA, and --tls-server-name \
                             if workers are addressed by IP"
            }
        };
        format!(" (its certificate is not signed by a CA {who} trusts: {fix})")
    } else {
        String::new()
    }
}

/// `e: cause: cause...`: tonic's own text ("transport error") does not say what went wrong.
fn with_causes(e: &dyn std::error::Error) -> String {
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

    #[test]
    fn a_connection_closed_while_connecting_reads_in_plain_words() {
        // What a worker killed a moment before the coordinator probed it gave.
        let cause = "transport error: error trying to connect, source: tonic::transport::Error(\
                     Transport, hyper::Error(Io, Custom { kind: BrokenPipe, error: \"stream \
                     closed because of a broken pipe\" }))";
        let err = unreachable(&Url::parse("http://127.0.0.1:1").unwrap(), cause);
        let text = &as_worker_failure(&err).unwrap().to_string();
        assert!(
            text.contains("is unreachable (connection closed)"),
            "{text}"
        );
        assert!(!text.contains("tonic"), "{text}");
    }
}
