//! Whether this process's threads may still enter Python.
//!
//! At interpreter exit CPython ends any thread that takes the GIL (`pthread_exit`), and that
//! forced unwind through Rust frames aborts the process (`FATAL: exception not rethrown`, exit
//! code 134). While a daemon thread's distributed query runs, our runtime's threads (progress
//! callbacks, resolvers, logs) and the Python thread waiting for the query would take it.
//! Python's `atexit`, which runs after non-daemon threads are joined and before finalisation,
//! calls [`close`]: from then on nothing of ours enters Python, and whoever is inside finishes
//! first.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

static CLOSING: AtomicBool = AtomicBool::new(false);
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// Leave to enter Python, held while inside.
pub struct Entry(());

impl Drop for Entry {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, SeqCst);
    }
}

/// Leave to enter Python; `None` once the interpreter is closing.
pub fn enter() -> Option<Entry> {
    INSIDE.fetch_add(1, SeqCst);
    let entry = Entry(());
    (!CLOSING.load(SeqCst)).then_some(entry)
}

/// `f` with the GIL, unless the interpreter is closing.
pub fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    let _entry = enter()?;
    Some(Python::attach(f))
}

/// From now on nothing of ours enters Python; returns when those inside have left (or after a
/// second: exit is never held up for long).
#[pyfunction]
pub fn close_interpreter(py: Python<'_>) {
    // pyo3-log enters Python for every record our threads log.
    log::set_max_level(log::LevelFilter::Off);
    CLOSING.store(true, SeqCst);
    // Those inside may be waiting for the GIL this thread holds.
    py.detach(|| {
        let deadline = Instant::now() + Duration::from_secs(1);
        while INSIDE.load(SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Never returns: for a thread that would otherwise take the GIL of a closing interpreter.
pub fn wait_for_exit() -> ! {
    loop {
        std::thread::park();
    }
}
