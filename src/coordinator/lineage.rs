//! What a kept table's parts were made from, so that parts made again (a holder lost) come
//! from the same data or not at all.
//!
//! A kept table's lineage is the query that made it. Run again after its sources changed —
//! a file rewritten, a kept table it read given more rows — it would make parts of another
//! version, and the table would mix them with the old parts its other holders still have. So
//! a run records its [`Sources`] when it is planned: each file its scans read (path, size,
//! modification time, as the listing found them) and each kept table at the version it read.
//! Before parts are made again the lineage is planned anew and its sources compared; any
//! difference fails the query with an error naming the table and what changed.
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::kept::KeptReads;

/// The data a run reads, as it was when the run was planned.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    files: Vec<(ObjectStoreUrl, ObjectMeta)>,
    kept: KeptReads,
}

impl Sources {
    /// The files `plan` scans, and the kept tables it read (`kept`).
    pub fn of(plan: &Arc<dyn ExecutionPlan>, kept: KeptReads) -> Self {
        let mut files = Vec::new();
        let _ = plan.apply(|node| {
            let scan = node
                .downcast_ref::<DataSourceExec>()
                .and_then(|s| s.data_source().downcast_ref::<FileScanConfig>());
            if let Some(scan) = scan {
                for file in scan.file_groups.iter().flat_map(|g| g.files()) {
                    files.push((scan.object_store_url.clone(), file.object_meta.clone()));
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        Self { files, kept }
    }

    /// The version of kept table `id` the run read, if it read that table.
    pub fn version_read(&self, id: uuid::Uuid) -> Option<u64> {
        self.kept.iter().find(|(t, _)| *t == id).map(|(_, v)| *v)
    }

    /// Fails, naming `table` and what changed, unless `now` (the same lineage planned again)
    /// reads what this read: the same kept tables at the same versions, and each file as it
    /// was (asked of its object store through `ctx`).
    pub async fn check_unchanged(
        &self,
        table: &str,
        now: &Sources,
        ctx: &TaskContext,
    ) -> Result<()> {
        let changed = |why: String| {
            exec_datafusion_err!(
                "kept table {table} lost parts with a worker and cannot make them again: {why} \
                 since it was kept, so parts made now would mix two versions of the data \
                 (create the table again)"
            )
        };
        for (id, version) in &self.kept {
            match now.kept.iter().find(|(other, _)| other == id) {
                None => return Err(changed("a kept table it was made from was dropped".into())),
                Some((_, v)) if v != version => {
                    return Err(changed("a kept table it was made from took inserts".into()))
                }
                Some(_) => {}
            }
        }
        for (url, meta) in &self.files {
            let store = ctx.runtime_env().object_store(url)?;
            let path = &meta.location;
            match store.head(path).await {
                // A time the plan's encoding did not carry (zero) is not compared.
                Ok(found)
                    if found.size == meta.size
                        && (meta.last_modified.timestamp() == 0
                            || found.last_modified == meta.last_modified) => {}
                Ok(_) => return Err(changed(format!("its source file {path} was rewritten"))),
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(changed(format!("its source file {path} was removed")))
                }
                Err(e) => {
                    return Err(changed(format!(
                        "its source file {path} cannot be read ({e})"
                    )))
                }
            }
        }
        Ok(())
    }
}
