//! Task-level recovery (`DistributedConfig(fault_tolerance="task")`): every task of a worker
//! stage writes its output partitions to a spool directory as it passes them on, and a run of
//! the query again after a lost worker reuses what was written there — so a lost worker costs
//! the work it had in flight, not the query's work.
//!
//! One mechanism does it, with the query-level retry (`coordinator::root`, `collect_whole`):
//!
//! * `spool_stages` puts a [`SpoolExec`] at the root of each worker stage's plan. The runs of
//!   one scan share a spool key and a task count per stage (`Spool`), so task `t` of stage `s`
//!   computes the same rows in every run: its files, once committed (written, then renamed
//!   into place), stand for it, and a run that finds them reads them instead of computing.
//! * A task that scans files is cut in chunks (`chunks`): slices of its files, run one after
//!   another and committed each, so the part of a task done before a loss is kept too. Its
//!   partitions pull the chunks as they read (no work runs ahead of its reader, as without
//!   spooling): spooling adds no wait between stages.
//!
//! The directory must be one every worker reads and writes (the embedded cluster and a
//! `LocalCluster` share the machine's; hosts of their own need a shared filesystem): a task
//! that finds no file computes its rows again, so a directory that is not shared costs time,
//! never rows. A scan's files are removed when the scan ends (`Spool::remove`).
mod chunks;
mod exec;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{NetworkBoundaryExt, Stage};
use uuid::Uuid;

pub use exec::{decode, encode, SpoolExec};

/// Where the runs of one scan spool, and the task count they all plan with.
#[derive(Clone, Debug)]
pub struct Spool {
    pub dir: PathBuf,
    pub key: Uuid,
    /// `distributed.max_tasks_per_stage` for every run of the scan, so that a run on fewer
    /// workers splits each stage as the first did (and finds its tasks' files).
    pub tasks_per_stage: usize,
}

impl Spool {
    /// A new scan's spool under `dir`, its stages split in `tasks_per_stage` tasks at most.
    pub fn new(dir: PathBuf, tasks_per_stage: usize) -> Self {
        Self {
            dir,
            key: Uuid::new_v4(),
            tasks_per_stage,
        }
    }

    /// The scan's own directory.
    pub fn scan_dir(&self) -> PathBuf {
        self.dir.join(self.key.to_string())
    }

    /// Removes the scan's files (best effort: a directory a worker of another host wrote
    /// is not ours to reach).
    pub fn remove(&self) {
        let dir = self.scan_dir();
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::info!("spool {}: not removed ({e})", dir.display());
            }
        }
    }
}

/// `plan` (distributed) with each worker stage's output spooled under `scan_dir`.
pub fn spool_stages(
    plan: Arc<dyn ExecutionPlan>,
    scan_dir: &Path,
) -> Result<Arc<dyn ExecutionPlan>> {
    let spooled = plan.transform_up(|node| {
        let Some(boundary) = node.as_network_boundary() else {
            return Ok(Transformed::no(node));
        };
        let Stage::Local(stage) = boundary.input_stage() else {
            return Ok(Transformed::no(node));
        };
        if stage.plan.is::<SpoolExec>() {
            return Ok(Transformed::no(node));
        }
        let leaf = !reads_other_stages(&stage.plan);
        let spool = SpoolExec::new(
            Arc::clone(&stage.plan),
            scan_dir.to_path_buf(),
            stage.num,
            leaf,
        );
        let spooled = replace_children_if_necessary(Arc::clone(&node), vec![Arc::new(spool)])?;
        Ok(Transformed::yes(spooled))
    })?;
    Ok(spooled.data)
}

/// Whether `plan` (a stage's) reads other stages over the network.
fn reads_other_stages(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        found |= node.is_network_boundary();
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}
