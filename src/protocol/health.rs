//! The client side of the standard gRPC health check, for `datafusion-distributed-worker
//! --check URL` (a probe command) and for anyone asking whether a worker serves.
use std::time::Duration;

use datafusion::common::Result;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use url::Url;

use super::grpc::WorkerChannels;
use super::urls::display_url;
use crate::errors::{worker_failure, FailureKind};

/// The worker's overall serving status (`SERVING`, `NOT_SERVING`, ...), within `timeout`.
pub async fn check_health(
    channels: &WorkerChannels,
    url: &Url,
    timeout: Duration,
) -> Result<String> {
    let shown = display_url(url);
    let asked = tokio::time::timeout(timeout, async {
        let mut client = HealthClient::new(channels.channel(url).await?);
        client
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map_err(|status| {
                worker_failure(
                    Some(shown),
                    FailureKind::Refused,
                    format!("health check failed: {}", status.message()),
                )
            })
    })
    .await
    .map_err(|_| {
        worker_failure(
            Some(shown),
            FailureKind::StoppedAnswering,
            format!("did not answer within {timeout:?}"),
        )
    })??;
    let status =
        ServingStatus::try_from(asked.into_inner().status).unwrap_or(ServingStatus::Unknown);
    Ok(status.as_str_name().to_string())
}
