//! `WorkerServer`: a datafusion-distributed worker served over gRPC (Arrow Flight) with tonic.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion::common::runtime::SpawnedTask;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion_distributed::{DistributedExt, Worker, WorkerQueryContext};
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::channels::{WorkerChannels, KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};
use crate::codec::import_session_codec;
use crate::errors::to_py_err;
use crate::object_stores::{StoreSpec, WorkerStores};
use crate::{runtime, task_cache};

#[pyclass(module = "datafusion_distributed_py._internal")]
pub struct WorkerServer {
    host: String,
    port: u16,
    worker: Worker,
    running: Mutex<Option<Running>>,
}

struct Running {
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
    _sweeper: SpawnedTask<()>,
}

#[pymethods]
impl WorkerServer {
    /// `codec` is the worker-side session's physical extension codec (or the session): it
    /// decodes what the coordinator's session encoded, Python UDFs included.
    /// `stores` are `(url, kind, options)` of the object stores the worker's setup registered.
    #[new]
    #[pyo3(signature = (host, port, codec, version, stores = Vec::new()))]
    fn new(
        host: String,
        port: u16,
        codec: &Bound<'_, PyAny>,
        version: String,
        stores: Vec<(String, String, BTreeMap<String, String>)>,
    ) -> PyResult<Self> {
        let codec = import_session_codec(codec)?;
        let runtime_env = Arc::new(RuntimeEnv::default());
        let own = stores.into_iter().map(StoreSpec::from).collect();
        let stores = Arc::new(WorkerStores::with_own(&runtime_env, own).map_err(to_py_err)?);
        let rt = Arc::clone(&runtime_env);
        // Worker-to-worker streams (shuffles) get the same keep-alive as the coordinator's.
        let channels = WorkerChannels::default();
        let worker = Worker::from_session_builder(move |qctx: WorkerQueryContext| {
            let codec = Arc::clone(&codec);
            let channels = channels.clone();
            // The coordinator names the object stores the query reads in a header.
            let registered = stores.apply(&rt, &qctx.headers);
            async move {
                registered?;
                Ok(qctx
                    .builder
                    .with_distributed_user_codec_arc(codec)
                    .with_distributed_channel_resolver(channels)
                    .build())
            }
        })
        .with_runtime_env(runtime_env)
        .with_version(version);
        Ok(Self {
            host,
            port,
            worker,
            running: Mutex::new(None),
        })
    }

    /// Binds the port and serves in the background; returns the bound port.
    fn start(&mut self, py: Python<'_>) -> PyResult<u16> {
        let mut running = self.running.lock().expect("poisoned");
        if running.is_some() {
            return Ok(self.port);
        }
        let addr = format!("{}:{}", self.host, self.port);
        let listener = py
            .detach(|| runtime::runtime().block_on(tokio::net::TcpListener::bind(&addr)))
            .map_err(|e| PyOSError::new_err(format!("cannot listen on {addr}: {e}")))?;
        let bound: SocketAddr = listener.local_addr()?;
        self.port = bound.port();
        let (tx, rx) = oneshot::channel();
        let service = self.worker.clone().into_worker_server();
        // No Nagle: small control messages (plans, handshakes) must not wait for delayed ACKs.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let task = runtime::runtime().spawn(async move {
            tonic::transport::Server::builder()
                // Drop the tasks of a coordinator that stops answering.
                .http2_keepalive_interval(Some(KEEP_ALIVE_INTERVAL))
                .http2_keepalive_timeout(Some(KEEP_ALIVE_TIMEOUT))
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await
        });
        *running = Some(Running {
            shutdown: tx,
            task,
            _sweeper: task_cache::sweep(self.worker.clone()),
        });
        Ok(self.port)
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    #[getter]
    fn host(&self) -> String {
        self.host.clone()
    }

    #[getter]
    fn running(&self) -> bool {
        self.running
            .lock()
            .expect("poisoned")
            .as_ref()
            .is_some_and(|r| !r.task.is_finished())
    }

    /// Stops accepting work; in-flight calls get up to `drain_seconds` to finish.
    #[pyo3(signature = (drain_seconds = 5.0))]
    fn stop(&self, py: Python<'_>, drain_seconds: f64) -> PyResult<()> {
        let Some(running) = self.running.lock().expect("poisoned").take() else {
            return Ok(());
        };
        let _ = running.shutdown.send(());
        let mut task = running.task;
        let drained = py.detach(|| {
            runtime::runtime().block_on(async {
                tokio::time::timeout(Duration::from_secs_f64(drain_seconds.max(0.0)), &mut task)
                    .await
            })
        });
        match drained {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(PyRuntimeError::new_err(format!(
                "worker server failed: {e}"
            ))),
            Ok(Err(e)) => Err(PyRuntimeError::new_err(format!("worker server task: {e}"))),
            Err(_) => {
                task.abort();
                Ok(())
            }
        }
    }
}
