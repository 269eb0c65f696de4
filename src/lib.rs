//! Rust core of datafusion-distributed-py: the Python layer owns ergonomics, this owns work.
//!
//! The tree reads as the architecture:
//! * [`python`]: the PyO3 classes and exceptions `_internal` exports; nothing else touches Python
//!   objects except the callbacks it hands down (resolver, progress).
//! * [`coordinator`]: runs in the user's process: plans a query for the current workers, sends
//!   its tasks, and hands the result back to datafusion-python as a table.
//! * [`worker`]: runs in worker processes (and in the embedded cluster): serves tasks.
//! * [`protocol`]: how the two reach each other: gRPC channels, in-process channels, worker URLs.
//! * [`codec`]: how plans travel: fragment and session codecs, and the codec datafusion-python
//!   serialises with (`WireCodec`).
//! * [`kept`]: results a user keeps, held by the workers that computed them.
//! * [`scan_tasks`]: how scans become tasks: in-memory tables and compressed files split whole.
//! * [`operators`]: our own plan nodes, one per file (their encoding is `codec`'s).
//! * [`object_stores`]: the user's object stores, described once and rebuilt where plans run.
//! * [`plan_nodes`]: what every plan node of ours has alike (tree walking and rebuilding).
//! * [`plan_rewrites`]: repairs applied to every plan before it is distributed.
//! * [`security`]: who may talk to a worker: token and TLS.
//! * [`table_providers`]: our table providers: tables whose files come from a table format's
//!   log (Delta Lake, Iceberg), and rows Python table functions return.
//! * [`runtime`]: the one tokio runtime, and whether its threads may still enter Python.
//! * [`batches`]: what a batch's rows take, and a slice copied into buffers of its own.
use pyo3::prelude::*;

/// jemalloc rather than glibc's malloc: writes (many threads allocating and freeing pages and
/// dictionaries) took 3-10% longer with glibc's (benchmarks/writes.py, side by side), queries
/// the same (TPC-H SF1). Its TLS model is the one a library loaded by `dlopen` may use.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod batches;
mod checks;
mod codec;
mod coordinator;
mod errors;
mod file_stream;
mod kept;
mod meters;
mod object_stores;
mod operators;
mod plan_nodes;
mod plan_rewrites;
mod protocol;
mod python;
mod runtime;
mod scan_tasks;
mod security;
mod spool;
mod table_providers;
mod worker;

/// Our package version; workers report it and the coordinator compares it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[pymodule]
fn _internal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    python::register(m)
}
