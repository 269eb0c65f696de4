//! `KeptTable`: the coordinator's handle on a kept table — where its parts are, the query that
//! made them (its lineage), and its life.
//!
//! Registered on the user's session as a table provider: a scan is a [`KeptScanExec`] naming
//! the parts, which travels to workers as a reference. Before a query is distributed,
//! [`resolve`] gives each kept scan the table's current parts, making them again from the
//! lineage first when a holder is no longer among the workers (or no longer holds them).
//! When the last handle goes (`DROP TABLE`, `deregister_table`, the frame collected) every
//! worker frees the table's parts.
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use url::Url;
use uuid::Uuid;

use super::kept_whole::{hold_whole_below, move_plan, whole_on};
use super::lineage::Sources;
use super::planner::{ClusterPlanner, PlanRequest, Planned};
use super::query::Run;
use super::table::DistributedTable;
use crate::kept::{
    self, freed, parts_of, store, Current, KeptPart, KeptScanExec, KeptSource, Op, Planning,
    ReadBack,
};
use crate::runtime;

pub struct KeptTable {
    pub id: Uuid,
    /// Itself, for the scans it makes to read their parts back through.
    pub(super) me: Weak<KeptTable>,
    pub name: String,
    pub(super) schema: SchemaRef,
    /// Its parts and the inserts they came from, changed whole under this one lock: a reader
    /// takes them at once, so it sees the table before or after an `INSERT`, never part of
    /// one.
    pub(super) state: Mutex<State>,
    pub(super) planner: Arc<ClusterPlanner>,
    /// The query that made the parts (with `keep` set): run again to make lost ones.
    pub(super) lineage: Arc<PlanRequest>,
    /// What that query read (run again only while its sources are as they were).
    sources: Sources,
    /// The coordinator's own rows it was made from, when it started there (an in-memory
    /// table): what was sent, sent again to remake lost parts, and what single-node reads
    /// here.
    pub(super) original: Option<Vec<RecordBatch>>,
    /// A holder was found not to hold its parts (a worker restarted at the same address).
    stale: AtomicBool,
    /// Held while lost parts are made again, so that two queries finding them lost remake
    /// them once.
    remaking: tokio::sync::Mutex<()>,
    /// The runs that made it (`dctx.metrics` of the frame kept shows them).
    pub made_by: Vec<Run>,
}

/// A kept table's parts, and the inserts some of them came from.
#[derive(Default)]
pub(super) struct State {
    /// Every part: the keeping query's, and each insert's (under its store id).
    pub parts: Vec<KeptPart>,
    /// The inserts, in order.
    pub appended: Vec<Appended>,
    /// A table made from it replaced it (`DELETE`, `UPDATE`): it takes no more inserts.
    pub retired: bool,
}

/// What one `INSERT` appended: its parts are held under store id `id`.
pub(super) struct Appended {
    pub id: Uuid,
    pub source: AppendSource,
}

/// Where an insert's rows came from, to make its parts again when a holder is lost.
#[derive(Clone)]
pub(super) enum AppendSource {
    /// Rows the coordinator computed (`ctx.sql`'s single-node INSERT) and sent: held here
    /// too, sent again, and read here by single-node.
    Rows(Vec<RecordBatch>),
    /// A query run on the workers (`DistributedContext.sql`'s INSERT), whose tasks kept
    /// their rows where they ran: run again while what it read is as it was.
    Query(Arc<PlanRequest>, Sources),
}

impl std::fmt::Debug for KeptTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptTable")
            .field("name", &self.name)
            .finish()
    }
}

/// Rows, bytes and parts a kept table holds on one worker (or the coordinator).
#[derive(Clone, Debug, Default)]
pub struct HolderShare {
    pub holder: String,
    pub parts: usize,
    pub rows: u64,
    pub bytes: u64,
    pub on_disk_bytes: u64,
}

impl KeptTable {
    /// Runs `request` keeping its result on the workers, as `name`; or, given `original`
    /// (an in-memory table's schema and rows, held here), sends those rows instead (and
    /// `request` only lends its settings). With `replacing`, the result is the new contents
    /// of that kept table (a `DELETE` or `UPDATE` of it, read by `request`): its rows take
    /// that table's schema, and the table is retired — unless an insert changed it since the
    /// run read it, when nothing is kept and the statement fails.
    pub async fn keep(
        planner: Arc<ClusterPlanner>,
        request: &PlanRequest,
        name: String,
        original: Option<(SchemaRef, Vec<RecordBatch>)>,
        replacing: Option<Arc<KeptTable>>,
    ) -> Result<Arc<Self>> {
        let id = Uuid::new_v4();
        let mut lineage = request.detached();
        if let Some(old) = &replacing {
            lineage.keep_as = Some(Arc::clone(&old.schema));
        }
        let lineage = Arc::new(lineage);
        let (original, rows) = match original {
            Some((schema, rows)) => (Some(rows), Some(schema)),
            None => (None, None),
        };
        // The first making reports progress to the caller; the lineage held for remakes not.
        let first = lineage.detached().reporting_to(request);
        let made = make_parts(&planner, &first, id, (original.as_deref(), rows), None);
        let (mut parts, mut schema, sources, made_by) = made.await?;
        if let Some(old) = &replacing {
            schema = Arc::clone(&old.schema);
            if !old.retire_at(sources.version_read(old.id)) {
                free_everywhere(&planner, &lineage, id).await;
                return Err(exec_datafusion_err!(
                    "kept table {} took an INSERT while this statement rewrote it; nothing \
                     was changed (run it again)",
                    old.name
                ));
            }
        }
        let held_as = (id, Arc::clone(&schema));
        parts = hold_whole(&planner, &lineage, held_as, parts, (0, None)).await;
        let table = Arc::new_cyclic(|me| Self {
            id,
            me: me.clone(),
            name,
            schema,
            state: Mutex::new(State {
                parts,
                ..Default::default()
            }),
            planner,
            lineage,
            sources,
            original,
            stale: AtomicBool::new(false),
            remaking: tokio::sync::Mutex::new(()),
            made_by,
        });
        let weak: Weak<dyn KeptSource> = Arc::downgrade(&table) as _;
        kept::register(id, weak);
        Ok(table)
    }

    /// Rows it holds now.
    pub fn rows(&self) -> u64 {
        let state = self.state.lock().expect("poisoned");
        state.parts.iter().map(|p| p.rows).sum()
    }

    /// Retires it (see [`State::retired`]) if it is still at `version`, the one its new
    /// contents were made from (None: made without reading it, as a `DELETE` of every row);
    /// whether it did.
    fn retire_at(&self, version: Option<u64>) -> bool {
        let mut state = self.state.lock().expect("poisoned");
        let now = state.appended.len() as u64;
        if state.retired || version.is_some_and(|v| v != now) {
            return false;
        }
        state.retired = true;
        true
    }

    /// Whether its parts are on `planner`'s workers.
    pub fn is_on(&self, planner: &Arc<ClusterPlanner>) -> bool {
        Arc::ptr_eq(&self.planner, planner)
    }

    /// Whether the workers of a query planned `at` reach its parts: its own cluster's, an
    /// embedded cluster's when it is on one (they share this process's store), or the same
    /// worker processes that hold them all.
    fn reached_from(&self, at: Planning<'_>) -> bool {
        if Arc::as_ptr(&self.planner) as usize == at.planner {
            return true;
        }
        match (self.planner.is_embedded(), at.embedded) {
            (true, true) => true,
            (true, false) | (false, true) => false,
            (false, false) => {
                let state = self.state.lock().expect("poisoned");
                let listed = |h: &String| at.workers.iter().any(|w| w.as_str() == h);
                state
                    .parts
                    .iter()
                    .all(|p| p.holder.as_ref().is_some_and(listed))
            }
        }
    }

    /// Where its rows are: one share per holder.
    pub fn shares(&self) -> Vec<HolderShare> {
        let state = self.state.lock().expect("poisoned");
        let mut shares: Vec<HolderShare> = Vec::new();
        for p in state.parts.iter() {
            let holder = holder_name(p, self.planner.is_embedded());
            let i = match shares.iter().position(|s| s.holder == holder) {
                Some(i) => i,
                None => {
                    shares.push(HolderShare {
                        holder,
                        ..Default::default()
                    });
                    shares.len() - 1
                }
            };
            let s = &mut shares[i];
            s.parts += 1;
            s.rows += p.rows;
            s.bytes += p.bytes;
            s.on_disk_bytes += if p.on_disk { p.bytes } else { 0 };
        }
        shares
    }

    /// The parts now, made again first when one of their holders is not among `workers` or
    /// was found not to hold them.
    async fn parts_now(&self, workers: &[Url]) -> Result<Vec<KeptPart>> {
        let all_held = || {
            let parts = self.state.lock().expect("poisoned").parts.clone();
            let listed = |p: &KeptPart| match &p.holder {
                Some(h) => workers.iter().any(|w| w.as_str() == h),
                None => true,
            };
            let lost = !self.planner.is_embedded() && !parts.iter().all(listed);
            (!lost && !self.stale.load(Ordering::Relaxed)).then_some(parts)
        };
        if let Some(parts) = all_held() {
            return Ok(parts);
        }
        let _one_at_a_time = self.remaking.lock().await;
        if let Some(parts) = all_held() {
            return Ok(parts); // made again by the query that held the lock before
        }
        log::warn!(
            "kept table {}: a worker holding its parts was lost; making them again from the \
             query that made them",
            self.name
        );
        // What the lost holders' peers still hold of it is freed first: the run replaces it.
        free_everywhere(&self.planner, &self.lineage, self.id).await;
        let rows = self.original.as_deref();
        let schema = Some(Arc::clone(&self.schema));
        let remade = async {
            let expect = Some((self.name.as_str(), &self.sources));
            let made = make_parts(
                &self.planner,
                &self.lineage,
                self.id,
                (rows, schema),
                expect,
            );
            let (parts, ..) = made.await?;
            let held_as = (self.id, Arc::clone(&self.schema));
            let mut parts =
                hold_whole(&self.planner, &self.lineage, held_as, parts, (0, None)).await;
            let sources: Vec<(Uuid, AppendSource)> = {
                let state = self.state.lock().expect("poisoned");
                state
                    .appended
                    .iter()
                    .map(|a| (a.id, a.source.clone()))
                    .collect()
            };
            let mut remade_ids = Vec::new();
            for (id, source) in sources {
                free_everywhere(&self.planner, &self.lineage, id).await;
                let expect = match &source {
                    AppendSource::Query(_, sources) => Some((self.name.as_str(), sources)),
                    AppendSource::Rows(_) => None,
                };
                let appended = self.make_appended(id, &source, expect, &parts).await?.0;
                parts.extend(appended);
                remade_ids.push(id);
            }
            Ok::<_, datafusion::error::DataFusionError>((parts, remade_ids))
        };
        let (mut parts, remade_ids) = remade.await.map_err(|e| {
            exec_datafusion_err!(
                "kept table {} lost parts with a worker, and making them again failed: {e}",
                self.name
            )
        })?;
        let mut state = self.state.lock().expect("poisoned");
        // Inserts committed while this ran keep the parts they made.
        let table = self.id;
        let newer = |p: &&KeptPart| {
            let id = p.store_id(table);
            id != table && !remade_ids.contains(&id)
        };
        parts.extend(state.parts.iter().filter(newer).cloned());
        state.parts = parts.clone();
        self.stale.store(false, Ordering::Relaxed);
        Ok(parts)
    }

    /// The parts of an insert kept under store id `id`, made from `source` (checked against
    /// its sources when made again, `expect`), and what its query read; held with the
    /// table's parts `joins` when those are held whole and all fit (see `kept_whole`).
    pub(super) async fn make_appended(
        &self,
        id: Uuid,
        source: &AppendSource,
        expect: Expect<'_>,
        joins: &[KeptPart],
    ) -> Result<(Vec<KeptPart>, Sources)> {
        let (parts, _, sources, _) = match source {
            AppendSource::Rows(rows) => {
                let rows = (Some(rows.as_slice()), Some(Arc::clone(&self.schema)));
                make_parts(&self.planner, &self.lineage, id, rows, None).await?
            }
            AppendSource::Query(request, _) => {
                let run = request.appending(id, Arc::clone(&self.schema));
                run_keeping(&self.planner, &Arc::new(run), expect).await?
            }
        };
        let mut holders: Vec<Option<&str>> = joins.iter().map(|p| p.holder.as_deref()).collect();
        holders.dedup();
        let held = match holders[..] {
            [] => Some((0, None)),
            [Some(holder)] => Some((joins.iter().map(|p| p.bytes).sum(), Some(holder))),
            _ => None, // the table is not held whole: its follow-ups span workers anyway
        };
        let mut parts = match held {
            Some(held) => {
                let held_as = (id, Arc::clone(&self.schema));
                // The insert's own settings say how much is held whole.
                let base = match source {
                    AppendSource::Query(request, _) => request,
                    AppendSource::Rows(_) => &self.lineage,
                };
                hold_whole(&self.planner, base, held_as, parts, held).await
            }
            None => parts,
        };
        for part in &mut parts {
            part.store = Some(id.to_string());
        }
        Ok((parts, sources))
    }

    /// A scan of it read in this process: what it holds here, the rest fetched from its
    /// holders (single-node's scan, and another cluster's query).
    pub(super) fn read_here(&self, projection: Option<Vec<usize>>) -> Result<KeptScanExec> {
        let scan = self.scan_node(projection)?;
        Ok(scan.with_read_back(Arc::new(FromHolders(self.me.clone()))))
    }

    fn scan_node(&self, projection: Option<Vec<usize>>) -> Result<KeptScanExec> {
        // Single-node reads what this process holds whole, each as one partition standing for
        // it (a distributed query is given the parts themselves, see `kept::resolve`): the
        // original rows of an in-memory table, and each insert's rows.
        let state = self.state.lock().expect("poisoned");
        let mut parts = match &self.original {
            Some(rows) => vec![KeptPart::whole(None, rows)],
            None => {
                let own = state.parts.iter().filter(|p| p.store.is_none());
                own.cloned().collect()
            }
        };
        for a in &state.appended {
            match &a.source {
                AppendSource::Rows(rows) => {
                    parts.push(KeptPart::whole(Some(a.id), rows));
                }
                AppendSource::Query(..) => {
                    let id = Some(a.id.to_string());
                    let its = state.parts.iter().filter(|p| p.store == id);
                    parts.extend(its.cloned());
                }
            }
        }
        drop(state);
        KeptScanExec::new(
            self.id,
            self.name.clone(),
            Op::Read,
            Arc::clone(&self.schema),
            projection,
            parts,
        )
    }
}

impl KeptSource for KeptTable {
    fn current<'a>(&'a self, at: Planning<'a>) -> BoxFuture<'a, Result<Current>> {
        Box::pin(async move {
            if self.reached_from(at) {
                return self.parts_now(at.workers).await.map(Current::Parts);
            }
            log::warn!(
                "kept table {} is held by the workers of another DistributedContext's cluster: \
                 this query reads its rows from there, through this process",
                self.name
            );
            let scan = Arc::new(self.read_here(None)?);
            let rows = collect(scan, Arc::new(TaskContext::default())).await?;
            Ok(Current::Rows(rows))
        })
    }

    fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    fn version(&self) -> u64 {
        self.state.lock().expect("poisoned").appended.len() as u64
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// Reads a part the coordinator does not hold from its holder, by a query of its own.
#[derive(Debug)]
struct FromHolders(Weak<KeptTable>);

impl ReadBack for FromHolders {
    fn read(&self, scan: KeptScanExec) -> Result<SendableRecordBatchStream> {
        let table = self
            .0
            .upgrade()
            .ok_or_else(|| exec_datafusion_err!("kept table {} was dropped", scan.name))?;
        let schema = scan.schema();
        let whole = match scan.parts.as_slice() {
            [part] if part.is_whole() => Some(part.store_id(table.id)),
            _ => None,
        };
        if let Some(id) = whole {
            // Rows this process holds: the original, or an insert's.
            let state = table.state.lock().expect("poisoned");
            let held = match state.appended.iter().find(|a| a.id == id) {
                Some(Appended {
                    source: AppendSource::Rows(rows),
                    ..
                }) => rows.clone(),
                _ => table.original.clone().unwrap_or_default(),
            };
            drop(state);
            let rows = held
                .iter()
                .map(|b| match &scan.projection {
                    Some(p) => b.project(p).map_err(Into::into),
                    None => Ok(b.clone()),
                })
                .collect::<Vec<_>>();
            let stream = futures::stream::iter(rows);
            return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)));
        }
        let request = Arc::new(internal_request(&table.lineage, Arc::new(scan))?);
        let planner = Arc::clone(&table.planner);
        let rows = futures::stream::once(stream(planner, request)).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rows)))
    }
}

/// Every kept table of this process still held.
pub fn all_kept_tables() -> Vec<Arc<KeptTable>> {
    let tables = kept::all().into_iter().map(KeptSource::into_any);
    tables
        .filter_map(|t| t.downcast::<KeptTable>().ok())
        .collect()
}

fn holder_name(p: &KeptPart, embedded: bool) -> String {
    match (&p.holder, embedded) {
        (_, false) if p.process == store::PROCESS.to_string() => "coordinator".into(),
        (Some(h), _) => h.trim_end_matches('/').to_string(),
        (None, _) => "coordinator".into(),
    }
}

/// Parts a run made, their rows' schema, what it read to make them, and its runs (more than
/// one when a lost worker cost a retry: what `metrics` shows of the making).
pub(super) type Made = (Vec<KeptPart>, SchemaRef, Sources, Vec<Run>);

/// What a run making parts again must find its sources as: those of the run that made them
/// first, for the table named.
pub(super) type Expect<'a> = Option<(&'a str, &'a Sources)>;

/// Makes a table's parts: runs its query (`lineage`), or sends the coordinator's `original`
/// rows (of `schema`) in runs of about [`SEND_BYTES`] each, so that what is being sent is
/// never a copy of the whole table at once.
pub(super) async fn make_parts(
    planner: &Arc<ClusterPlanner>,
    lineage: &PlanRequest,
    table: Uuid,
    (original, schema): (Option<&[RecordBatch]>, Option<SchemaRef>),
    expect: Expect<'_>,
) -> Result<Made> {
    let (Some(rows), Some(schema)) = (original, schema) else {
        return run_keeping(planner, &Arc::new(lineage.keeping(table, 0)), expect).await;
    };
    let (mut parts, mut made_by) = (Vec::new(), Vec::new());
    for (i, run) in runs(rows, SEND_BYTES).into_iter().enumerate() {
        let scan = MemorySourceConfig::try_new_exec(&[run], Arc::clone(&schema), None)?;
        let request = lineage.running_plan(scan).keeping(table, (i as u32) << 16);
        let (sent, _, _, by) = run_keeping(planner, &Arc::new(request), None).await?;
        parts.extend(sent);
        made_by.extend(by);
    }
    Ok((parts, schema, Sources::default(), made_by))
}

/// How much of an in-memory table one run sends.
const SEND_BYTES: usize = 64 << 20;

/// `rows` in groups of about `bytes` each (a bigger batch sliced, zero-copy).
fn runs(rows: &[RecordBatch], bytes: usize) -> Vec<Vec<RecordBatch>> {
    let mut runs = vec![Vec::new()];
    let mut size = 0;
    for batch in rows {
        let per_row = batch.get_array_memory_size() / batch.num_rows().max(1);
        let step = (bytes / per_row.max(1)).max(1);
        let mut offset = 0;
        while offset < batch.num_rows() {
            let piece = batch.slice(offset, step.min(batch.num_rows() - offset));
            offset += piece.num_rows();
            size += piece.num_rows() * per_row;
            runs.last_mut().expect("one run at least").push(piece);
            if size >= bytes {
                runs.push(Vec::new());
                size = 0;
            }
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

/// Runs a keeping request: the parts its tasks hold, their schema and its sources; first
/// checking, when it makes parts again (`expect`), that it reads what the first run read.
pub(super) async fn run_keeping(
    planner: &Arc<ClusterPlanner>,
    request: &Arc<PlanRequest>,
    expect: Expect<'_>,
) -> Result<Made> {
    let planned = planner.plan(request, 1).await?;
    let schema = planned
        .kept_schema
        .clone()
        .ok_or_else(|| exec_datafusion_err!("a keeping run without its rows' schema"))?;
    let sources = planned.sources.clone();
    if let Some((table, first)) = expect {
        first
            .check_unchanged(table, &sources, &planned.task_ctx)
            .await?;
    }
    // A rerun after a worker was lost keeps its tasks' parts under the same keys: the parts of
    // the failed run it does not replace are freed with the table.
    let table = DistributedTable::new(Arc::clone(planner), Arc::clone(request), planned);
    let (_, batches) = table.collect_whole(false).await?;
    let made_by = table.runs();
    for (_, log) in &made_by {
        log.detach_progress(); // held by the table beyond this call
    }
    let mut parts = parts_of(&batches.concat())?;
    let own = store::PROCESS.to_string();
    if !planner.is_embedded() && parts.iter().any(|p| p.process == own) {
        let rows_schema = request
            .keep_as
            .clone()
            .unwrap_or_else(|| Arc::clone(&schema));
        parts = move_to_workers(planner, request, parts, rows_schema).await?;
    }
    Ok((parts, schema, sources, made_by))
}

/// Where a run's rows met on the coordinator (its last stage runs there: a `LIMIT`, an
/// order, one row), the parts it kept there sent on to the workers, so that a table's
/// rows are all held by workers: read where they are, never inlined into each query's plan,
/// and one kind of part whatever statement made it.
async fn move_to_workers(
    planner: &Arc<ClusterPlanner>,
    request: &PlanRequest,
    parts: Vec<KeptPart>,
    schema: SchemaRef,
) -> Result<Vec<KeptPart>> {
    let super::planner::Role::Keep { table, .. } = request.role else {
        return Ok(parts);
    };
    let own = store::PROCESS.to_string();
    let (here, mut there): (Vec<KeptPart>, Vec<KeptPart>) =
        parts.into_iter().partition(|p| p.process == own);
    let mut rows = Vec::new();
    for p in &here {
        let held = store::get(table, (p.task, p.partition))
            .ok_or_else(|| exec_datafusion_err!("a part kept on the coordinator is gone"))?;
        rows.extend(held?);
    }
    store::free(table);
    let scan = MemorySourceConfig::try_new_exec(&[rows], Arc::clone(&schema), None)?;
    let mut send = request.running_plan(scan).keeping(table, MOVED);
    send.keep_as = Some(schema);
    let send = Arc::new(send);
    let planned = planner.plan(&send, 1).await?;
    let summary = run_planned(Arc::clone(planner), send, planned).await?;
    let summary: Vec<RecordBatch> = summary.try_collect().await?;
    there.extend(parts_of(&summary)?);
    Ok(there)
}

/// The task numbers of parts moved from the coordinator start here (clear of the runs that
/// send an in-memory table, numbered `i << 16`).
const MOVED: u32 = 1 << 24;

/// `parts` of store `store` (rows of `schema`), held whole by one worker when they should be
/// (`kept_whole`): `extra` bytes held already on `prefer` (the table an insert joins); as they
/// were when not, or when the move fails.
async fn hold_whole(
    planner: &Arc<ClusterPlanner>,
    base: &PlanRequest,
    (store, schema): (Uuid, SchemaRef),
    parts: Vec<KeptPart>,
    (extra, prefer): (u64, Option<&str>),
) -> Vec<KeptPart> {
    let limit = match hold_whole_below(&base.options) {
        Ok(limit) => limit,
        Err(e) => {
            log::warn!("{e}");
            return parts;
        }
    };
    let Some(target) = whole_on(&parts, limit, extra, prefer) else {
        return parts;
    };
    if planner.is_embedded() {
        // One process holds every part: which in-process worker reads them is only routing.
        let holder = Some(target);
        return parts
            .into_iter()
            .map(|p| KeptPart {
                holder: holder.clone(),
                ..p
            })
            .collect();
    }
    let moved = async {
        let mut moving = move_plan((store, schema), &parts, &target)?;
        let mut request = base.running_plan(moving.plan);
        // A lost worker fails the move, not the statement: the parts then stay where they are.
        request.max_retries = 0;
        let moved = parts_of(&run(planner, &Arc::new(request)).await?)?;
        moving.stay.extend(moved);
        free_on(planner, base, store, &moving.sources).await;
        Ok::<_, datafusion::error::DataFusionError>(moving.stay)
    };
    match moved.await {
        Ok(moved) => moved,
        Err(e) => {
            log::info!("kept parts of {store} stay where they are (moving them to {target}: {e})");
            parts
        }
    }
}

/// Runs `request` on the cluster (with the query-level retry) and gathers its rows.
async fn run(
    planner: &Arc<ClusterPlanner>,
    request: &Arc<PlanRequest>,
) -> Result<Vec<RecordBatch>> {
    let planned = planner.plan(request, 1).await?;
    let table = DistributedTable::new(Arc::clone(planner), Arc::clone(request), planned);
    Ok(table.collect_whole(false).await?.1.concat())
}

pub(super) async fn stream(
    planner: Arc<ClusterPlanner>,
    request: Arc<PlanRequest>,
) -> Result<SendableRecordBatchStream> {
    let planned = planner.plan(&request, 1).await?;
    run_planned(planner, request, planned).await
}

async fn run_planned(
    planner: Arc<ClusterPlanner>,
    request: Arc<PlanRequest>,
    planned: Planned,
) -> Result<SendableRecordBatchStream> {
    let table = DistributedTable::new(planner, request, planned);
    let root = table.start(None).await?;
    let schema = root.schema();
    let parts = root.properties().partitioning.partition_count();
    let ctx = Arc::new(TaskContext::default());
    let streams = (0..parts)
        .map(|p| root.execute(p, Arc::clone(&ctx)))
        .collect::<Result<Vec<_>>>()?;
    // The table lives as long as its rows are read.
    let rows = futures::stream::iter(streams).flatten().map(move |b| {
        let _ = &table;
        b
    });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, rows)))
}

/// A request running `plan` (one of our own nodes) with `base`'s settings and codec.
pub(super) fn internal_request(
    base: &PlanRequest,
    plan: Arc<dyn ExecutionPlan>,
) -> Result<PlanRequest> {
    let bytes = physical_plan_to_bytes_with_extension_codec(plan, base.codec.as_ref())?;
    Ok(base.running(bytes.to_vec()))
}

/// Frees `table`'s parts on every worker (and in this process).
pub(super) async fn free_everywhere(
    planner: &Arc<ClusterPlanner>,
    base: &PlanRequest,
    table: Uuid,
) {
    store::free(table);
    if planner.is_embedded() {
        return;
    }
    let Ok(workers) = planner.urls() else { return };
    free_on(planner, base, table, &workers).await;
}

/// Frees `table`'s parts on `workers`.
async fn free_on(planner: &Arc<ClusterPlanner>, base: &PlanRequest, table: Uuid, workers: &[Url]) {
    let parts: Vec<KeptPart> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| KeptPart {
            task: i as u32,
            partition: 0,
            rows: 0,
            bytes: 0,
            on_disk: false,
            process: String::new(),
            holder: Some(w.to_string()),
            store: None,
        })
        .collect();
    let node = KeptScanExec::new(
        table,
        String::new(),
        Op::Free,
        Arc::new(datafusion::arrow::datatypes::Schema::empty()),
        None,
        parts,
    );
    let freed_rows = async {
        let mut request = internal_request(base, Arc::new(node?))?;
        // Never run again: a worker that is gone took its parts with it.
        request.max_retries = 0;
        run(planner, &Arc::new(request)).await
    };
    match freed_rows.await {
        Ok(rows) => {
            let (parts, bytes) = freed(&rows);
            log::debug!("kept table {table}: {parts} parts ({bytes} bytes) freed on the workers");
        }
        // A worker that is gone took its parts with it.
        Err(e) => log::info!("kept table {table}: freeing its parts on the workers: {e}"),
    }
}

impl Drop for KeptTable {
    fn drop(&mut self) {
        kept::unregister(self.id);
        let state = self.state.get_mut().expect("poisoned");
        let appended: Vec<Uuid> = state.appended.iter().map(|a| a.id).collect();
        let (planner, lineage, id) = (
            Arc::clone(&self.planner),
            Arc::clone(&self.lineage),
            self.id,
        );
        runtime::handle().spawn(async move {
            for id in std::iter::once(id).chain(appended) {
                free_everywhere(&planner, &lineage, id).await;
            }
        });
    }
}
