//! The coordinator side: runs in the user's process. It plans a query for the current workers
//! (`planner`), checks them first (`handshake`), runs scalar subqueries first
//! (`subqueries`), cuts the plan into stages (`distribute`),
//! records where each task goes (`task_log`, `tracking`), and hands the result back to
//! datafusion-python as a table (`table`, `root`), and its run's metrics per operator
//! (`operator_metrics`).
mod distribute;
mod empty_batches;
mod handshake;
mod live;
mod operator_metrics;
mod planner;
mod root;
mod settings;
mod subqueries;
mod table;
mod task_log;
mod tracking;

pub use operator_metrics::operator_metrics;
pub use planner::{ClusterPlanner, PlanRequest};
pub use table::DistributedTable;
pub use task_log::TaskRecord;
