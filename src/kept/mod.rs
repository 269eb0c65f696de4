//! Kept data: results a user keeps (`CREATE TABLE AS`, `df.cache()`) stay on the workers that
//! computed them, and later queries carry a reference to them, not their rows.
//!
//! * [`keep`]: `KeepExec`, run in each task of a query's last stage, holds the task's rows.
//! * [`store`]: what this process holds (a worker's parts, in memory or spilled to disk).
//! * [`scan`]: `KeptScanExec`, a scan read where the parts are (tasks routed to holders).
//! * [`table`]: `KeptTable`, the coordinator's provider: parts, lineage, freeing on drop.
mod keep;
mod scan;
mod store;
mod table;

pub use keep::{encode as encode_keep, decode as decode_keep, keep_on_workers};
pub use scan::{decode as decode_scan, encode as encode_scan, route_tasks, scale_up, task_count};
pub use table::{all_tables, mark_stale, resolve, KeptTable};

/// What a worker says when asked for a part it does not hold (it restarted since): the
/// coordinator then makes the table's parts again.
pub const MISSING: &str = "kept part missing";
