//! Kept data: results a user keeps (`CREATE TABLE AS`, `df.cache()`, big in-memory tables)
//! stay on the workers that computed them, and later queries carry a reference to them, not
//! their rows. The plan nodes and the process's store live here; the table a session sees
//! (`coordinator::KeptTable`), which runs queries to make its parts, is the coordinator's.
//!
//! * [`part`]: `KeptPart`, one part of a table: the task that made it, its holder, its size.
//! * [`keep`]: `KeepExec`, run in each task of a query's last stage, holds the task's rows.
//! * [`store`]: what this process holds (a worker's parts, in memory or spilled to disk).
//! * [`scan`]: `KeptScanExec`, a scan read where the parts are.
//! * [`routing`]: which worker each task of a stage reading or keeping parts goes to.
//! * [`registry`]: the kept tables of this process, and the planning step that gives each
//!   kept scan its table's current parts.
mod keep;
mod part;
mod registry;
mod routing;
mod scan;
pub mod store;

pub use keep::{
    conform, decode as decode_keep, encode as encode_keep, keep_on_workers, parts_of, KeepExec,
};
pub use part::KeptPart;
pub use registry::{
    all, mark_stale, register, resolve, unregister, Current, KeptReads, KeptSource, Planning,
};
pub use routing::route_tasks;
pub use scan::{
    decode as decode_scan, encode as encode_scan, freed, scale_up, task_count, KeptScanExec, Op,
    ReadBack,
};

/// What a worker says when asked for a part it does not hold (it restarted since): the
/// coordinator then makes the table's parts again.
pub const MISSING: &str = "kept part missing";
