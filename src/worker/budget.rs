//! A process's memory and disk budget: the runtime its tasks draw on.
//!
//! Worker processes take it from `--memory-limit` / `--spill-dir`; the embedded cluster from the
//! user's `SessionContext` (its pool's size, its spill directories), so that a query on the
//! embedded cluster is bounded where single-node is.
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};

/// What a process's tasks may use.
#[derive(Clone, Debug, Default)]
pub struct Budget {
    /// Bytes of memory queries may hold before they spill (or fail); None: unbounded.
    pub memory_limit: Option<usize>,
    /// Where spill files go (none: the system's temporary directory).
    pub spill_dirs: Vec<PathBuf>,
    /// The most bytes the spill files may take together (None: DataFusion's default).
    pub max_spill_bytes: Option<u64>,
}

impl Budget {
    /// The runtime of this budget.
    pub fn runtime_env(&self) -> Result<Arc<RuntimeEnv>> {
        let mut builder = RuntimeEnvBuilder::new();
        if let Some(limit) = self.memory_limit {
            // Fair to spillable operators (sorts, aggregations, repartitions): each gets a
            // share of the pool and spills past it, so they make room instead of failing the
            // query; the top consumers are named when the pool runs out.
            let fair = FairSpillPool::new(limit);
            let top = NonZeroUsize::new(5).expect("5 is not zero");
            builder = builder.with_memory_pool(Arc::new(TrackConsumersPool::new(fair, top)));
        }
        let mut disk = DiskManagerBuilder::default();
        if !self.spill_dirs.is_empty() {
            for dir in &self.spill_dirs {
                std::fs::create_dir_all(dir).map_err(|e| {
                    DataFusionError::Configuration(format!(
                        "spill directory {}: {e}",
                        dir.display()
                    ))
                })?;
            }
            disk = disk.with_mode(DiskManagerMode::Directories(self.spill_dirs.clone()));
        }
        if let Some(max) = self.max_spill_bytes {
            disk = disk.with_max_temp_directory_size(max);
        }
        builder.with_disk_manager_builder(disk).build_arc()
    }
}
