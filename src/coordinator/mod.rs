//! The coordinator side: runs in the user's process. It plans a query for the current workers
//! (`planner`), checks them first (`handshake`), runs scalar subqueries first
//! (`subqueries`), runs the build sides of joins whose size is a guess first, to plan them
//! from their real sizes (`adaptive_joins`), cuts the plan into stages (`distribute`),
//! records where each task goes (`task_log`, `tracking`), and hands the result back to
//! datafusion-python as a table (`table`, `root`), its run's metrics per operator
//! (`operator_metrics`) and its stages as a graph for pictures (`stage_graph`); results kept
//! on the workers are tables of its own (`kept_table`), seen by the session as table
//! providers (`kept_provider`) that `INSERT` appends to (`kept_append`).
mod adaptive_joins;
mod distribute;
mod empty_batches;
mod handshake;
mod join_sides;
mod kept_append;
mod kept_provider;
mod kept_table;
mod kept_whole;
mod lineage;
mod live;
mod load;
mod operator_metrics;
mod planner;
mod query;
mod root;
mod run_first;
mod settings;
mod skewed_keys;
mod stage_graph;
mod stall_guard;
mod step_clock;
mod subqueries;
mod table;
mod task_log;
#[cfg(test)]
mod test_sessions;
mod tracking;

pub use handshake::EarlyHandshake;
pub use kept_append::{InsertProvider, APPEND_EXEC};
pub use kept_table::{all_kept_tables, KeptTable};
pub use operator_metrics::operator_metrics;
pub use planner::{ClusterPlanner, PlanRequest, Role};
pub use query::Run;
pub use stage_graph::stage_graph;
pub use table::DistributedTable;
pub use task_log::{ProgressSink, ProgressUpdate, TaskRecord};
