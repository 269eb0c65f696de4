//! Rust core of datafusion-distributed-py: the Python layer owns ergonomics, this owns work.
use pyo3::prelude::*;

mod capsule;
mod channels;
mod codec;
mod cooperative;
mod coordinator;
mod embedded;
mod errors;
mod generate_series;
mod memory_tables;
mod object_stores;
mod resolver;
mod root;
mod runtime;
mod table;
mod task_cache;
mod tracking;
mod worker;

/// Our package version; workers report it and the coordinator compares it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The DataFusion major version this library was built against.
fn datafusion_major() -> u64 {
    datafusion_ffi::version()
}

#[pymodule]
fn _internal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Our logs go to Python's `logging` (logger names `_internal.*`); DataFusion's own debug
    // logs stay out, so hot paths never take the GIL to ask whether to log.
    let _ = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::Loggers)?
        .filter(log::LevelFilter::Warn)
        .filter_target("_internal".to_string(), log::LevelFilter::Debug)
        .install();
    m.add("__version__", VERSION)?;
    m.add("DATAFUSION_MAJOR", datafusion_major())?;
    m.add(
        "DistributedError",
        m.py().get_type::<errors::DistributedError>(),
    )?;
    m.add("WorkerError", m.py().get_type::<errors::WorkerError>())?;
    m.add_class::<coordinator::Coordinator>()?;
    m.add_class::<table::DistributedPlan>()?;
    m.add_class::<worker::WorkerServer>()?;
    Ok(())
}
