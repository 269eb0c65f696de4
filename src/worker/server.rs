//! A worker process's datafusion-distributed `Worker`, served over gRPC (Arrow Flight) by tonic,
//! behind the token check and TLS of its [`Security`].
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::runtime::SpawnedTask;
use datafusion::common::Result;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SessionState;
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::service::interceptor::InterceptedService;

use super::budget::Budget;
use super::grpc_errors::CountErrorsLayer;
use super::sessions::TaskSessions;
use super::stores::WorkerStores;
use super::task_cache;
use crate::codec::register_window_functions;
use crate::object_stores::StoreSpec;
use crate::protocol::task_headers::{TaskKey, TaskTrace};
use crate::protocol::{FixedResolver, WorkerChannels, KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};
use crate::security::{Security, TokenCheck};

/// How a worker process is set up.
pub struct WorkerOptions {
    /// Reported to coordinators in the handshake.
    pub version: String,
    /// Object stores its setup registered: they serve its reads over the coordinator's.
    pub own_stores: Vec<StoreSpec>,
    pub security: Security,
    /// Bytes of memory the worker's queries may use before they spill (or fail).
    pub memory_limit: Option<usize>,
    /// Where spill files go (default: the system's temporary directory).
    pub spill_dir: Option<PathBuf>,
}

fn runtime_env(options: &WorkerOptions) -> Result<Arc<RuntimeEnv>> {
    Budget {
        memory_limit: options.memory_limit,
        spill_dirs: options.spill_dir.iter().cloned().collect(),
        max_spill_bytes: None,
    }
    .runtime_env()
}

/// A worker whose sessions decode fragments with `codec` (the worker-side session's codec:
/// Python UDFs included), reach other workers over keep-alive gRPC channels with the same
/// security, and read through the object stores each query names (see `WorkerStores`).
pub fn build_worker(
    codec: Arc<dyn PhysicalExtensionCodec>,
    options: WorkerOptions,
) -> Result<Worker> {
    let runtime_env = runtime_env(&options)?;
    crate::meters::watch_runtime(&runtime_env);
    let stores = Arc::new(WorkerStores::new(
        Arc::clone(&runtime_env),
        options.own_stores,
    )?);
    // Worker-to-worker streams (shuffles) get the same keep-alive, token and TLS.
    let channels = WorkerChannels::new(options.security).on_a_worker();
    let sessions = TaskSessions::default();
    Ok(
        Worker::from_session_builder(move |qctx: WorkerQueryContext| {
            let session = task_session(qctx, &stores, &sessions, &codec, &channels);
            async move { session }
        })
        .with_runtime_env(runtime_env)
        .with_version(options.version),
    )
}

/// The session a task runs in: the object stores and window functions its query names in
/// headers, the worker's codec and channels.
fn task_session(
    qctx: WorkerQueryContext,
    stores: &WorkerStores,
    sessions: &TaskSessions,
    codec: &Arc<dyn PhysicalExtensionCodec>,
    channels: &WorkerChannels,
) -> Result<SessionState> {
    // The coordinator names the object stores the query reads in a header.
    let runtime = stores.runtime_for(&qctx.headers)?;
    let mut state = sessions.session(qctx.builder.with_runtime_env(runtime));
    // The query's own window functions travel in a header (see `window_functions`).
    register_window_functions(&mut state, &qctx.headers, &**codec)?;
    let config = state.config_mut();
    if let Some(trace) = TaskTrace::from_headers(&qctx.headers) {
        config.set_extension(Arc::new(trace));
    }
    if let Some(key) = TaskKey::from_headers(&qctx.headers) {
        config.set_extension(Arc::new(key));
    }
    config.set_distributed_user_codec_arc(Arc::clone(codec));
    config.set_distributed_channel_resolver(channels.clone());
    Ok(state)
}

/// A worker being served: its bound address and how to stop it.
pub struct Serving {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
    _sweeper: SpawnedTask<()>,
}

impl Serving {
    /// Binds `addr` and serves `worker` in the background (call inside our runtime).
    pub async fn start(worker: Worker, addr: &str, security: &Security) -> Result<Self, String> {
        #[allow(unused_mut)]
        let mut server = tonic::transport::Server::builder()
            .layer(CountErrorsLayer)
            // Drop the tasks of a coordinator that stops answering.
            .http2_keepalive_interval(Some(KEEP_ALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEP_ALIVE_TIMEOUT));
        if let Some(tls) = &security.tls {
            #[cfg(feature = "tls")]
            {
                server = server
                    .tls_config(tls.server_config()?)
                    .map_err(|e| format!("TLS: {e}"))?;
            }
            #[cfg(not(feature = "tls"))]
            {
                let _ = tls;
                return Err("this build of datafusion-distributed-py has no TLS support".into());
            }
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (shutdown, stopped) = oneshot::channel();
        // The token is checked before a request reaches the worker service, so before any plan
        // (or pickled Python code in one) is decoded.
        let check = TokenCheck::new(security.token.as_ref());
        let service = InterceptedService::new(
            worker
                .clone()
                .into_worker_server()
                .max_decoding_message_size(security.max_message_bytes),
            move |request| check.check(request),
        );
        // Live progress (running tasks' rows, memory, CPU) for the coordinator, behind the
        // same token.
        let check = TokenCheck::new(security.token.as_ref());
        let observability = InterceptedService::new(
            worker.with_observability_service(Arc::new(FixedResolver(vec![]))),
            move |request| check.check(request),
        );
        // The standard health service stays open without the token, so probes need no secret;
        // it says NOT_SERVING while the worker drains.
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        // No Nagle: small control messages (plans, handshakes) must not wait for delayed ACKs.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let task = tokio::spawn(async move {
            server
                .add_service(health_service)
                .add_service(service)
                .add_service(observability)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                    health
                        .set_service_status("", tonic_health::ServingStatus::NotServing)
                        .await;
                })
                .await
        });
        Ok(Self {
            addr,
            shutdown,
            task,
            _sweeper: task_cache::sweep(worker),
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Stops accepting work; in-flight calls get `drain` to finish (`None`: no limit), then
    /// are dropped.
    pub async fn stop(self, drain: Option<Duration>) -> std::result::Result<(), String> {
        let _ = self.shutdown.send(());
        let mut task = self.task;
        let drained = match drain {
            Some(limit) => tokio::time::timeout(limit, &mut task).await,
            None => Ok((&mut task).await),
        };
        match drained {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(e)) => Err(format!("server task: {e}")),
            Err(_) => {
                task.abort();
                Ok(())
            }
        }
    }
}
