//! The worker side: what runs tasks, in worker processes and in the embedded cluster.
mod budget;
mod embedded;
mod grpc_errors;
mod server;
mod sessions;
mod stores;
mod task_cache;

pub use budget::Budget;
pub use embedded::EmbeddedCluster;
pub use server::{build_worker, Serving, WorkerOptions};
