//! Tables whose file list comes from a table format's log (Delta Lake, Iceberg), not from
//! listing a directory: exactly a snapshot's data files, each with its partition values.
//!
//! Registered on datafusion-python's session as an FFI table provider, so single-node reads it
//! as any table. Its scan is a native Parquet scan hidden in one leaf ([`SnapshotScanExec`]);
//! [`WireCodec`], installed on the session the coordinator serialises with, writes that
//! leaf as the Parquet scan inside it, so the distributed planner splits it into tasks like any
//! other file scan.
mod codec;
mod memory;
mod provider;
mod reader_scan;
mod scan;
mod snapshot;

pub use codec::{WireCodec, WIRE_CODEC_ID};
pub use memory::InMemoryTable;
pub use provider::{FileFormat, SnapshotSource, SnapshotTable};
pub use reader_scan::{BatchSource, ReaderTable};
pub use snapshot::{ColumnStats, SnapshotFile};
