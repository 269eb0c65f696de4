//! Object stores registered on the user's `SessionContext`, rebuilt where plans run.
//!
//! datafusion-python keeps its object stores in its own RuntimeEnv, which does not cross the
//! FFI boundary; the Python layer records how each store was configured and hands us
//! [`StoreSpec`]s. The coordinator registers them on its runtime (shared with embedded
//! workers) and sends them to worker processes in a request header, never in plans or logs.
mod header;
mod spec;
mod unavailable;

pub use header::{from_headers, to_headers, STORES_HEADER};
pub use spec::{register_all, StoreSpec};
