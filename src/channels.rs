//! gRPC channels to worker processes, one per URL and reused across queries.
//!
//! The crate's default channels have no keep-alive: a worker that stops answering without
//! closing its socket (frozen, SIGSTOPped, cut off by the network) would hang the query forever.
//! Ours ping over HTTP/2 and fail the query's streams when the pings go unanswered.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::Result;
use datafusion_distributed::grpc::{create_worker_client, BoxCloneSyncChannel};
use datafusion_distributed::{ChannelResolver, WorkerChannel};
use tonic::transport::{Channel, Endpoint};
use url::Url;

use crate::errors::worker_failure;
use crate::resolver::display_url;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A ping every 5 s, answered within 20 s: a silent worker fails its queries within 25 s,
/// while a worker whose threads are busy still has ample time to answer.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Clone, Default)]
pub struct WorkerChannels {
    open: Arc<Mutex<HashMap<Url, Channel>>>,
}

impl WorkerChannels {
    async fn channel(&self, url: &Url) -> Result<Channel> {
        if let Some(channel) = self.open.lock().expect("poisoned").get(url) {
            return Ok(channel.clone());
        }
        let unreachable = |e: tonic::transport::Error| {
            worker_failure(format!(
                "worker {} is unreachable: {}",
                display_url(url),
                with_causes(&e)
            ))
        };
        let channel = Endpoint::from_shared(url.to_string())
            .map_err(unreachable)?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect()
            .await
            .map_err(unreachable)?;
        // A channel reconnects by itself after a failure, so it is kept even then.
        let mut open = self.open.lock().expect("poisoned");
        Ok(open.entry(url.clone()).or_insert(channel).clone())
    }
}

#[async_trait]
impl ChannelResolver for WorkerChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        let channel = self.channel(url).await?;
        Ok(create_worker_client(BoxCloneSyncChannel::new(channel)))
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
