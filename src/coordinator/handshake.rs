//! The pre-query handshake: every worker is asked its version before a query is sent.
use std::time::Duration;

use datafusion::common::Result;
use datafusion_distributed::{ChannelResolver, GetWorkerInfoRequest};
use url::Url;

use crate::errors::{is_rejected_credentials, is_worker_failure, name_worker, worker_failure};
use crate::protocol::{display_url, unreachable, WorkerChannels};
use crate::VERSION;

/// How long a worker may take to answer the pre-query handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks every worker for its version before a query is sent: a down worker or a worker of
/// another release is reported by URL, quickly, instead of failing mid-query.
pub async fn check_workers(channels: &WorkerChannels, urls: &[Url]) -> Result<()> {
    let checks = urls.iter().map(|url| async move {
        let shown = display_url(url);
        let info = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
            let mut client = channels.get_worker_client_for_url(url).await?;
            client.get_worker_info(GetWorkerInfoRequest {}).await
        })
        .await;
        match info {
            Err(_) => Err(worker_failure(format!(
                "worker {shown} did not answer within {}s",
                HANDSHAKE_TIMEOUT.as_secs()
            ))),
            Ok(Err(e)) if is_worker_failure(&e) || is_rejected_credentials(&e) => {
                Err(name_worker(shown, e))
            }
            Ok(Err(e)) => Err(unreachable(url, &e.find_root().message())),
            Ok(Ok(info)) if info.version != VERSION => Err(worker_failure(format!(
                "worker {shown} runs datafusion-distributed-py {}, but this coordinator runs \
                 {VERSION}; run the same release on the coordinator and every worker",
                if info.version.is_empty() {
                    "<unknown>"
                } else {
                    &info.version
                }
            ))),
            Ok(Ok(_)) => Ok(()),
        }
    });
    futures::future::try_join_all(checks).await.map(|_| ())
}
