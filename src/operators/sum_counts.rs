//! `SumCounts`: the tasks' row counts of a write added up, and the write's commit.
//!
//! Each task of a write (see `plan_rewrites::parallel_writes`) writes its files under a
//! directory private to the run, `<target>/.dfdpy-<id>/` (`Staging`), and returns its count.
//! Once every task succeeded, `SumCounts` moves the files into place (a rename on
//! filesystems, a copy and delete on object stores); if any failed or the run is dropped
//! (Ctrl-C), the run's directory is removed, and nothing of it is left in the target. It runs
//! on the coordinator, or on the worker when the whole write is one task (it travels as its
//! run's directory, `codec::write_commit`).
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use datafusion::common::{internal_err, Result};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};

use crate::plan_nodes::one_partition;

/// Where a run's files wait until every task has written: `<target>/.dfdpy-<id>/`.
#[derive(Debug, Clone)]
pub struct Staging {
    store: ObjectStoreUrl,
    target: ObjectPath,
    private: ObjectPath,
}

impl Staging {
    /// `target` (a path on the store `store`) and the run's own directory below it.
    pub fn new(store: ObjectStoreUrl, target: ObjectPath, private: ObjectPath) -> Self {
        Self {
            store,
            target,
            private,
        }
    }

    /// (store, target, the run's directory) as text, as the codec writes them.
    pub fn parts(&self) -> [&str; 3] {
        [
            self.store.as_str(),
            self.target.as_ref(),
            self.private.as_ref(),
        ]
    }

    /// Moves every file of the run into the target, keeping its path below the run's
    /// directory (partition directories), then removes the run's directory.
    async fn commit(&self, store: &Arc<dyn ObjectStore>) -> Result<()> {
        let files: Vec<ObjectMeta> = store.list(Some(&self.private)).try_collect().await?;
        for file in files {
            let Some(below) = file.location.prefix_match(&self.private) else {
                continue;
            };
            let to = below.fold(self.target.clone(), |path, part| path.join(part));
            store.rename(&file.location, &to).await?;
        }
        self.remove_directory();
        Ok(())
    }

    /// Deletes what the run wrote (best effort: an abort is reported by its own error); the
    /// number of files it found.
    async fn abort(&self, store: &Arc<dyn ObjectStore>) -> usize {
        let files: Vec<ObjectMeta> = match store.list(Some(&self.private)).try_collect().await {
            Ok(files) => files,
            Err(e) => {
                log::warn!("cannot list a failed write's files to remove them: {e}");
                return 0;
            }
        };
        for file in &files {
            if let Err(e) = store.delete(&file.location).await {
                log::warn!("cannot remove {} of a failed write: {e}", file.location);
            }
        }
        self.remove_directory();
        files.len()
    }

    /// Deletes again what tasks cancelled mid-file still finish after the first `abort` (a
    /// file completes when its writer flushes), until two sweeps in a row find nothing.
    async fn abort_stragglers(self, store: Arc<dyn ObjectStore>) {
        let mut quiet = 0;
        for _ in 0..STRAGGLER_SWEEPS {
            tokio::time::sleep(STRAGGLER_PAUSE).await;
            quiet = if self.abort(&store).await == 0 {
                quiet + 1
            } else {
                0
            };
            if quiet == 2 {
                return;
            }
        }
    }

    /// A filesystem keeps the emptied directories, which an object store does not have.
    fn remove_directory(&self) {
        if self.store.as_str().starts_with("file://") {
            let dir = std::path::Path::new("/").join(self.private.as_ref());
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Removes a run's files if it is dropped before it committed (Ctrl-C, a failed task).
struct AbortUnlessCommitted {
    staging: Staging,
    store: Arc<dyn ObjectStore>,
    committed: bool,
}

impl AbortUnlessCommitted {
    /// Moves the run's files into place; once that succeeded, the drop removes nothing.
    async fn commit(&mut self) -> Result<()> {
        self.staging.commit(&self.store).await?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for AbortUnlessCommitted {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let (staging, store) = (self.staging.clone(), Arc::clone(&self.store));
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn(async move {
                staging.abort(&store).await;
                staging.abort_stragglers(store).await;
            })),
            // Outside a runtime (a stream dropped by Python): the first sweep before returning.
            Err(_) => {
                crate::runtime::handle().block_on(staging.abort(&store));
                drop(crate::runtime::handle().spawn(staging.abort_stragglers(store)));
            }
        }
    }
}

/// How often, and how many times at most, an aborted run's directory is swept again.
const STRAGGLER_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);
const STRAGGLER_SWEEPS: usize = 40;

/// The tasks' row counts (one `count` row each) added up into the one row a write returns.
#[derive(Debug)]
pub struct SumCounts {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    /// The run's files to move into place once every task wrote its own.
    staging: Staging,
}

impl SumCounts {
    pub fn new(input: Arc<dyn ExecutionPlan>, staging: Staging) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Self {
            input,
            properties: Arc::new(properties),
            staging,
        }
    }

    /// The run's files this node commits.
    pub fn staging(&self) -> &Staging {
        &self.staging
    }
}

impl DisplayAs for SumCounts {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SumCounts: rows written by every task")
    }
}

impl ExecutionPlan for SumCounts {
    crate::plan_nodes::one_input_node!("SumCounts", input, |this, input| Self::new(
        input,
        this.staging.clone()
    ));

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        one_partition(partition, "SumCounts")?;
        let schema = self.schema();
        let mut guard = AbortUnlessCommitted {
            store: ctx.runtime_env().object_store(&self.staging.store)?,
            staging: self.staging.clone(),
            committed: false,
        };
        let counts = self.input.execute(0, ctx)?;
        let out_schema = Arc::clone(&schema);
        let total = futures::stream::once(async move {
            let batches: Vec<RecordBatch> = counts.try_collect().await?;
            guard.commit().await?;
            let mut sum = 0u64;
            for batch in &batches {
                let Some(column) = batch.column(0).as_any().downcast_ref::<UInt64Array>() else {
                    return internal_err!("a write's count is not a UInt64 column");
                };
                sum += column.iter().flatten().sum::<u64>();
                debug_assert!(column.len() <= 1);
            }
            Ok(RecordBatch::try_new(
                out_schema,
                vec![Arc::new(UInt64Array::from(vec![sum]))],
            )?)
        })
        .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, total)))
    }
}
