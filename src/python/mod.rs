//! The Python surface of the Rust core: the classes and exceptions of `_internal`.
//!
//! Each file holds one exported class (or the exceptions); they translate between Python
//! objects and the Rust types of the other modules, and block on the runtime with the GIL
//! released. The work itself lives in `coordinator/` and `worker/`.
use pyo3::prelude::*;

mod capsule;
mod coordinator;
mod defaults;
mod errors;
mod ffi_scan;
mod ffi_settings;
mod health;
mod in_memory_table;
mod kept_insert;
mod kept_table;
mod meters;
mod plan;
mod progress_queue;
mod reader_table;
mod request;
mod security;
mod snapshot_table;
mod statement;
mod stream_table;
mod wire_codec;
mod worker;

/// Adds everything `_internal` exports to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Our logs go to Python's `logging` (logger names `_internal.*`). Nothing below Info is
    // let through, so DataFusion's many debug records stop at the `log` macros instead of
    // asking this logger (and Python) on hot paths.
    let _ = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::Loggers)?
        .filter(log::LevelFilter::Warn)
        .filter_target("_internal".to_string(), log::LevelFilter::Info)
        .install();
    m.add("__version__", crate::VERSION)?;
    // The DataFusion major this library was built against (checked at import).
    m.add("DATAFUSION_MAJOR", datafusion_ffi::version())?;
    m.add("WIRE_CODEC_ID", crate::codec::WIRE_CODEC_ID)?;
    errors::register(m)?;
    m.add_class::<coordinator::Coordinator>()?;
    m.add_class::<request::Handshake>()?;
    m.add_class::<progress_queue::ProgressQueue>()?;
    m.add_class::<plan::DistributedPlan>()?;
    m.add_class::<worker::WorkerServer>()?;
    m.add_class::<snapshot_table::SnapshotTable>()?;
    m.add_class::<kept_table::KeptTable>()?;
    m.add_class::<kept_table::MadeBy>()?;
    m.add_function(wrap_pyfunction!(kept_table::kept_tables, m)?)?;
    m.add_function(wrap_pyfunction!(kept_table::kept_table, m)?)?;
    m.add_function(wrap_pyfunction!(kept_table::append_exec_prefix, m)?)?;
    m.add_class::<kept_insert::KeptInsert>()?;
    m.add_function(wrap_pyfunction!(statement::create_table_as, m)?)?;
    m.add_function(wrap_pyfunction!(statement::delete_or_update, m)?)?;
    m.add_class::<wire_codec::WireCodec>()?;
    m.add_class::<in_memory_table::InMemoryTable>()?;
    m.add_class::<reader_table::ReaderTable>()?;
    m.add_function(wrap_pyfunction!(stream_table::unbounded_table, m)?)?;
    m.add_function(wrap_pyfunction!(health::check_health, m)?)?;
    m.add_function(wrap_pyfunction!(meters::process_meters, m)?)?;
    m.add_function(wrap_pyfunction!(meters::keep_task_events, m)?)?;
    m.add_function(wrap_pyfunction!(meters::take_task_events, m)?)?;
    m.add_function(wrap_pyfunction!(defaults::planner_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(statement::distributed_setting, m)?)?;
    m.add_function(wrap_pyfunction!(
        crate::runtime::interpreter::close_interpreter,
        m
    )?)?;
    Ok(())
}
