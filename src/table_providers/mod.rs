//! Our table providers. `SnapshotTable`: a table whose file list comes from a table format's
//! log (Delta Lake, Iceberg), not from listing a directory: exactly a snapshot's data files,
//! each with its partition values. `InMemoryTable`, `ReaderTable`: rows a Python table
//! function returns, held in memory or read through its format's own reader.
//!
//! Registered on datafusion-python's session as FFI table providers, so single-node reads them
//! as any table. A snapshot's scan is a native Parquet scan hidden in one leaf
//! ([`SnapshotScanExec`]); `codec::WireCodec`, installed on the session the coordinator
//! serialises with, writes that leaf as the Parquet scan inside it, so the distributed planner
//! splits it into tasks like any other file scan.
mod memory;
mod provider;
mod reader_scan;
mod scan;
mod snapshot;
#[cfg(test)]
pub mod test_support;

pub use memory::InMemoryTable;
pub use provider::{FileFormat, SnapshotSource, SnapshotTable};
pub use reader_scan::{BatchSource, ReaderTable};
pub use scan::SnapshotScanExec;
pub use snapshot::{ColumnStats, SnapshotFile};
