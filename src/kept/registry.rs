//! Every kept table of this process, by id, as a query's planning finds them: the kept
//! scans of a plan get their table's current parts here ([`resolve`]), made again first where
//! a holder was lost. The tables themselves (`coordinator::KeptTable`) run queries to make
//! their parts; this side only knows them through [`KeptSource`].
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::ExecutionPlan;
use futures::future::BoxFuture;
use url::Url;
use uuid::Uuid;

use super::part::KeptPart;
use super::scan::{KeptScanExec, Op};

/// The cluster a query is planned for, as a kept table it reads sees it.
#[derive(Clone, Copy)]
pub struct Planning<'a> {
    /// Its workers.
    pub workers: &'a [Url],
    /// Its planner, by address (alive while it plans), to tell a table's own cluster.
    pub planner: usize,
    /// Whether its workers share this process's store (the embedded cluster).
    pub embedded: bool,
}

/// What a query reads of a kept table.
pub enum Current {
    /// Its parts, where the query's workers reach them.
    Parts(Vec<KeptPart>),
    /// Its rows (all columns), read from the workers of the cluster holding it, which the
    /// query's workers do not reach: they travel in the plan as an in-memory table's.
    Rows(Vec<RecordBatch>),
}

/// A kept table as planning sees it.
pub trait KeptSource: Send + Sync {
    /// What a query planned `at` reads of it now: its parts (made again first when one of
    /// their holders is lost or was found not to hold them), or its rows when another
    /// cluster holds it.
    fn current<'a>(&'a self, at: Planning<'a>) -> BoxFuture<'a, Result<Current>>;
    /// A holder was found not to hold its parts (a worker restarted at the same address).
    fn mark_stale(&self);
    /// How many inserts it has taken: a run that read it reads the same rows again only at
    /// the same version.
    fn version(&self) -> u64;
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

type Tables = HashMap<Uuid, Weak<dyn KeptSource>>;

static TABLES: LazyLock<Mutex<Tables>> = LazyLock::new(Mutex::default);

pub fn register(id: Uuid, table: Weak<dyn KeptSource>) {
    TABLES.lock().expect("poisoned").insert(id, table);
}

pub fn unregister(id: Uuid) {
    TABLES.lock().expect("poisoned").remove(&id);
}

fn get(id: &Uuid) -> Option<Arc<dyn KeptSource>> {
    TABLES
        .lock()
        .expect("poisoned")
        .get(id)
        .and_then(Weak::upgrade)
}

/// Every kept table still held in this process.
pub fn all() -> Vec<Arc<dyn KeptSource>> {
    let tables = TABLES.lock().expect("poisoned");
    tables.values().filter_map(Weak::upgrade).collect()
}

/// The kept tables a plan reads, each at the version it read (see [`KeptSource::version`]).
pub type KeptReads = Vec<(Uuid, u64)>;

/// Gives each kept scan in `plan` its table's current parts (made again where lost), and says
/// which tables it read, at which version.
pub async fn resolve(
    plan: Arc<dyn ExecutionPlan>,
    at: Planning<'_>,
) -> Result<(Arc<dyn ExecutionPlan>, KeptReads)> {
    let mut ids = Vec::new();
    plan.apply(|node| {
        if let Some(scan) = node.downcast_ref::<KeptScanExec>() {
            if scan.op == Op::Read && !ids.contains(&scan.table) {
                ids.push(scan.table);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if ids.is_empty() {
        return Ok((plan, Vec::new()));
    }
    let mut current = HashMap::new();
    let mut read = Vec::new();
    for id in ids {
        let Some(table) = get(&id) else {
            // Internal runs (reading back, freeing) name their parts themselves.
            continue;
        };
        let now = table.current(at).await?;
        read.push((id, table.version()));
        current.insert(id, now);
    }
    plan.transform_up(|node| {
        let Some(scan) = node.downcast_ref::<KeptScanExec>() else {
            return Ok(Transformed::no(node));
        };
        match current.get(&scan.table) {
            None => Ok(Transformed::no(node)),
            Some(Current::Parts(parts)) => {
                // Every part is a worker's (a keeping run moves what met on the coordinator
                // on to the workers); on the embedded cluster the workers share this
                // process's store.
                let held = parts.iter().map(|p| held_by_any(p, at)).collect();
                Ok(Transformed::yes(Arc::new(scan.over(held)?) as _))
            }
            Some(Current::Rows(rows)) => {
                let (schema, projection) = (&scan.table_schema, scan.projection.clone());
                let rows = MemorySourceConfig::try_new_exec(
                    std::slice::from_ref(rows),
                    Arc::clone(schema),
                    projection,
                )?;
                Ok(Transformed::yes(rows as _))
            }
        }
    })
    .map(|t| (t.data, read))
}

/// `part`, named as held by the first of the workers when it names no holder, or, on the
/// embedded cluster, none of them (its workers share the coordinator's store).
fn held_by_any(part: &KeptPart, at: Planning<'_>) -> KeptPart {
    let mut part = part.clone();
    let listed = |h: &String| at.workers.iter().any(|w| w.as_str() == h);
    if part.holder.is_none() || (at.embedded && !part.holder.as_ref().is_some_and(listed)) {
        part.holder = at.workers.first().map(Url::to_string);
    }
    part
}

/// Marks the kept table an error says a worker did not hold as stale; whether it was one.
pub fn mark_stale(err: &DataFusionError) -> bool {
    let text = err.to_string();
    let Some(at) = text.find(super::MISSING) else {
        return false;
    };
    let tail = &text[at..];
    let id = tail
        .split(['(', ')'])
        .find_map(|s| Uuid::parse_str(s.trim()).ok());
    match id.and_then(|id| get(&id)) {
        Some(table) => {
            table.mark_stale();
            true
        }
        None => false,
    }
}
