//! The one tokio runtime this library owns.
//!
//! datafusion-python polls our futures on its own runtime threads, where our copy of tokio sees
//! no runtime; every FFI object we export therefore carries this runtime's handle, and every
//! blocking call from Python runs here with the GIL released (Python UDFs on worker threads
//! need the GIL). [`interpreter`] says whether our threads may still enter Python.
pub mod interpreter;
mod ticker;

use std::future::Future;

use futures::FutureExt;
use std::sync::OnceLock;

use pyo3::prelude::*;

use tokio::runtime::{Handle, Runtime};

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

pub fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("dfd-py")
            .enable_all()
            .build()
            .expect("failed to start the datafusion-distributed-py tokio runtime")
    })
}

pub fn handle() -> Handle {
    runtime().handle().clone()
}

/// Runs `fut` to completion on our runtime with the GIL released, so that Ctrl-C can be
/// noticed: the wait is chopped into short slices between which Python signals are checked.
/// On a pending KeyboardInterrupt the future is dropped (dropping its streams cancels the
/// query) and the exception propagates.
///
/// The future is polled on the calling thread (inside the runtime, so what it spawns runs on
/// the runtime's threads): handing it to a runtime thread and waiting to be woken costs two
/// thread switches, a noticeable part of a short query on a busy machine.
pub fn wait_for<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    // A panic stays an ordinary Python exception, as it was on a spawned task.
    let fut = std::panic::AssertUnwindSafe(fut).catch_unwind();
    let mut fut = std::pin::pin!(fut);
    loop {
        let slice = std::time::Duration::from_millis(100);
        let (done, _entry) = py.detach(|| {
            // The slice is timed by a clock of our own (see `ticker`), not the runtime's.
            let done = runtime().block_on(async {
                match futures::future::select(&mut fut, ticker::elapsed(slice)).await {
                    futures::future::Either::Left((done, _)) => Ok(done),
                    futures::future::Either::Right(((), _)) => Err(()),
                }
            });
            // Taking the GIL back while the interpreter exits would abort the process (see
            // `interpreter`): this (daemon) thread then waits for the exit instead.
            let entry = interpreter::enter().unwrap_or_else(|| interpreter::wait_for_exit());
            (done, entry)
        });
        match done {
            Ok(Ok(result)) => return result,
            Ok(Err(_panic)) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "task failed: the datafusion-distributed-py core panicked",
                ))
            }
            Err(_elapsed) => {
                py.check_signals()?;
                surface_async_exceptions(py)?;
            }
        }
    }
}

/// Raises an exception another thread set on this one (`PyThreadState_SetAsyncExc`, how a
/// `KeyboardInterrupt` reaches a thread other than the main one: IPython, web servers, tests).
/// `check_signals` only sees signals, and only in the main thread; CPython delivers a pending
/// async exception when Python code next runs in this thread, so a no-op Python call does it.
fn surface_async_exceptions(py: Python<'_>) -> PyResult<()> {
    static NOOP: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let noop = NOOP.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.eval(c"lambda: None", None, None)?.unbind())
    })?;
    noop.call0(py).map(drop)
}
