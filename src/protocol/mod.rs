//! How the coordinator and workers reach each other: worker URLs, where they come from, and
//! the channels (gRPC to processes, direct calls in-process) that carry plans and batches.
mod connect_failure;
mod grpc;
mod health;
mod in_process;
mod peer_channel;
mod per_partition;
mod resolver;
pub mod task_headers;
mod urls;
pub mod worker_info;

pub use connect_failure::unreachable;
pub use grpc::{WorkerChannels, KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};
pub use health::check_health;
pub use in_process::{InProcessChannelResolver, InProcessWorkers};
pub use resolver::{FixedResolver, ListWorkers, Workers};
pub use urls::{display_url, parse_worker_url};
