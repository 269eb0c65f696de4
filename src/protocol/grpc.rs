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

use super::connect_failure::{unreachable_from, Side};
use super::peer_channel::PeerChannel;
use super::per_partition::PerPartitionChannel;
use super::urls::display_url;
use crate::errors::{as_lost_peer, worker_failure, FailureKind};
use crate::security::Security;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A ping every 5 s, answered within 20 s: a silent worker fails its queries within 25 s,
/// while a worker whose threads are busy still has ample time to answer.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

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
        let endpoint = match self.endpoint(url) {
            Ok(endpoint) => endpoint,
            Err(NoDial::Forbidden(refused)) => return Err(refused),
            Err(NoDial::Failed(e)) => return Err(unreachable_from(self.side, url, &e).await),
        };
        match endpoint.connect().await {
            Ok(channel) => Ok(channel),
            Err(e) => Err(unreachable_from(self.side, url, &e).await),
        }
    }

    /// How `url` is dialled.
    fn endpoint(&self, url: &Url) -> std::result::Result<Endpoint, NoDial> {
        #[allow(unused_mut)]
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(NoDial::Failed)?
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
                    .map_err(NoDial::Failed)?;
            }
            #[cfg(not(feature = "tls"))]
            return Err(NoDial::Forbidden(worker_failure(
                Some(display_url(url)),
                FailureKind::Refused,
                "is addressed with https://, but this build of datafusion-distributed-py has no \
                 TLS support"
                    .into(),
            )));
        } else if self.security.tls.is_some() {
            return Err(NoDial::Forbidden(worker_failure(
                Some(display_url(url)),
                FailureKind::Refused,
                format!(
                    "is addressed with http://, but this side is configured for TLS: use \
                     https://{}",
                    display_url(url).trim_start_matches("http://")
                ),
            )));
        }
        Ok(endpoint)
    }
}

/// Why `url` is not dialled.
enum NoDial {
    /// This side's settings forbid it.
    Forbidden(DataFusionError),
    Failed(tonic::transport::Error),
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
        let channel = self.authorized(url).await;
        match self.side {
            Side::Coordinator => Ok(Box::new(PerPartitionChannel(create_worker_client(
                channel?,
            )))),
            // A worker's failures to reach a peer must reach the coordinator as such.
            Side::Worker => {
                let peer = display_url(url).to_string();
                let channel = channel.map_err(|e| as_lost_peer(&peer, e))?;
                let inner = Box::new(PerPartitionChannel(create_worker_client(channel)));
                Ok(Box::new(PeerChannel { peer, inner }))
            }
        }
    }
}
