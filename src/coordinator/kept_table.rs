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

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{exec_datafusion_err, not_impl_err, Result, SchemaExt};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use url::Url;
use uuid::Uuid;

use super::planner::{ClusterPlanner, PlanRequest, Planned};
use super::table::DistributedTable;
use crate::kept::{self, freed, parts_of, store, KeptPart, KeptScanExec, KeptSource, Op, ReadBack};
use crate::runtime;

pub struct KeptTable {
    pub id: Uuid,
    /// Itself, for the scans it makes to read their parts back through.
    me: Weak<KeptTable>,
    pub name: String,
    schema: SchemaRef,
    parts: Mutex<Vec<KeptPart>>,
    planner: Arc<ClusterPlanner>,
    /// The query that made the parts (with `keep` set): run again to make lost ones.
    lineage: Arc<PlanRequest>,
    /// The coordinator's own rows it was made from, when it started there (an in-memory
    /// table): what was sent, sent again to remake lost parts, and what single-node reads
    /// here.
    original: Option<Vec<RecordBatch>>,
    /// Rows `INSERT` appended, each insert's under a store id of its own: kept on the workers
    /// as the rest, and held here too (sent again if a worker is lost; read here by
    /// single-node).
    appended: Mutex<Vec<(Uuid, Vec<RecordBatch>)>>,
    /// A holder was found not to hold its parts (a worker restarted at the same address).
    stale: AtomicBool,
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
    /// `request` only lends its settings).
    pub async fn keep(
        planner: Arc<ClusterPlanner>,
        request: &PlanRequest,
        name: String,
        original: Option<(SchemaRef, Vec<RecordBatch>)>,
    ) -> Result<Arc<Self>> {
        let id = Uuid::new_v4();
        let lineage = Arc::new(request.detached());
        let (original, rows) = match original {
            Some((schema, rows)) => (Some(rows), Some(schema)),
            None => (None, None),
        };
        let (parts, schema) = make_parts(&planner, &lineage, id, original.as_deref(), rows).await?;
        let table = Arc::new_cyclic(|me| Self {
            id,
            me: me.clone(),
            name,
            schema,
            parts: Mutex::new(parts),
            planner,
            lineage,
            original,
            appended: Mutex::default(),
            stale: AtomicBool::new(false),
        });
        let weak: Weak<dyn KeptSource> = Arc::downgrade(&table) as _;
        kept::register(id, weak);
        Ok(table)
    }

    /// Whether its parts are on `planner`'s workers.
    pub fn is_on(&self, planner: &Arc<ClusterPlanner>) -> bool {
        Arc::ptr_eq(&self.planner, planner)
    }

    /// Where its rows are: one share per holder.
    pub fn shares(&self) -> Vec<HolderShare> {
        let parts = self.parts.lock().expect("poisoned");
        let mut shares: Vec<HolderShare> = Vec::new();
        for p in parts.iter() {
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
        let parts = self.parts.lock().expect("poisoned").clone();
        let listed = |p: &KeptPart| match &p.holder {
            Some(h) => workers.iter().any(|w| w.as_str() == h),
            None => true,
        };
        let lost = !self.planner.is_embedded() && !parts.iter().all(listed);
        if !lost && !self.stale.load(Ordering::Relaxed) {
            return Ok(parts);
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
        let (parts, _) = make_parts(&self.planner, &self.lineage, self.id, rows, schema)
            .await
            .map_err(|e| {
                exec_datafusion_err!(
                    "kept table {} lost parts with a worker, and making them again failed: {e}",
                    self.name
                )
            })?;
        let mut parts = parts;
        let appended = self.appended.lock().expect("poisoned").clone();
        for (id, rows) in &appended {
            free_everywhere(&self.planner, &self.lineage, *id).await;
            parts.extend(self.send_appended(*id, rows).await?);
        }
        *self.parts.lock().expect("poisoned") = parts.clone();
        self.stale.store(false, Ordering::Relaxed);
        Ok(parts)
    }

    fn scan_node(&self, projection: Option<Vec<usize>>) -> Result<KeptScanExec> {
        // Single-node reads what this process holds whole, each as one partition standing for
        // it (a distributed query is given the parts themselves, see `kept::resolve`): the
        // original rows of an in-memory table, and each insert's rows.
        let mut parts = match self.original {
            Some(_) => vec![KeptPart::whole(None)],
            None => {
                let parts = self.parts.lock().expect("poisoned");
                parts
                    .iter()
                    .filter(|p| p.store.is_none())
                    .cloned()
                    .collect()
            }
        };
        let appended = self.appended.lock().expect("poisoned");
        parts.extend(appended.iter().map(|(id, _)| KeptPart::whole(Some(*id))));
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
    fn current_parts<'a>(&'a self, workers: &'a [Url]) -> BoxFuture<'a, Result<Vec<KeptPart>>> {
        Box::pin(self.parts_now(workers))
    }

    fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
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

/// Runs a keeping request: the parts its tasks hold, and their schema.
/// Makes a table's parts: runs its query (`lineage`), or sends the coordinator's `original`
/// rows (of `schema`) in runs of about [`SEND_BYTES`] each, so that what is being sent is
/// never a copy of the whole table at once.
async fn make_parts(
    planner: &Arc<ClusterPlanner>,
    lineage: &PlanRequest,
    table: Uuid,
    original: Option<&[RecordBatch]>,
    schema: Option<SchemaRef>,
) -> Result<(Vec<KeptPart>, SchemaRef)> {
    let (Some(rows), Some(schema)) = (original, schema) else {
        return run_keeping(planner, &Arc::new(lineage.keeping(table, 0))).await;
    };
    let mut parts = Vec::new();
    for (i, run) in runs(rows, SEND_BYTES).into_iter().enumerate() {
        let scan = MemorySourceConfig::try_new_exec(&[run], Arc::clone(&schema), None)?;
        let request = lineage.running_plan(scan).keeping(table, (i as u32) << 16);
        parts.extend(run_keeping(planner, &Arc::new(request)).await?.0);
    }
    Ok((parts, schema))
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

/// Runs a keeping request: the parts its tasks hold, and their schema.
async fn run_keeping(
    planner: &Arc<ClusterPlanner>,
    request: &Arc<PlanRequest>,
) -> Result<(Vec<KeptPart>, SchemaRef)> {
    let planned = planner.plan(request, 1).await?;
    let schema = planned
        .kept_schema
        .clone()
        .ok_or_else(|| exec_datafusion_err!("a keeping run without its rows' schema"))?;
    let rows = run_planned(Arc::clone(planner), Arc::clone(request), planned).await?;
    let batches: Vec<RecordBatch> = rows.try_collect().await?;
    Ok((parts_of(&batches)?, schema))
}

/// Runs `request` on the cluster (with the query-level retry) and gathers its rows.
async fn run(
    planner: &Arc<ClusterPlanner>,
    request: &Arc<PlanRequest>,
) -> Result<Vec<RecordBatch>> {
    let stream = stream(Arc::clone(planner), Arc::clone(request)).await?;
    stream.try_collect().await
}

async fn stream(
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
fn internal_request(base: &PlanRequest, plan: Arc<dyn ExecutionPlan>) -> Result<PlanRequest> {
    let bytes = physical_plan_to_bytes_with_extension_codec(plan, base.codec.as_ref())?;
    Ok(base.running(bytes.to_vec()))
}

/// Frees `table`'s parts on every worker (and in this process).
async fn free_everywhere(planner: &Arc<ClusterPlanner>, base: &PlanRequest, table: Uuid) {
    store::free(table);
    if planner.is_embedded() {
        return;
    }
    let Ok(workers) = planner.urls() else { return };
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
        let request = Arc::new(internal_request(base, Arc::new(node?))?);
        run(planner, &request).await
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
        let appended: Vec<Uuid> = self
            .appended
            .get_mut()
            .expect("poisoned")
            .iter()
            .map(|(id, _)| *id)
            .collect();
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
            let appended = table.appended.lock().expect("poisoned");
            let held = match appended.iter().find(|(a, _)| *a == id) {
                Some((_, rows)) => rows.clone(),
                None => table.original.clone().unwrap_or_default(),
            };
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

impl KeptTable {
    /// Sends `batches` to the workers as parts of their own, appended to the table.
    async fn append(&self, batches: Vec<RecordBatch>) -> Result<u64> {
        let id = Uuid::new_v4();
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let parts = self.send_appended(id, &batches).await?;
        self.appended.lock().expect("poisoned").push((id, batches));
        self.parts.lock().expect("poisoned").extend(parts);
        Ok(rows)
    }

    /// The parts made of appended `rows` kept under store id `id`.
    async fn send_appended(&self, id: Uuid, rows: &[RecordBatch]) -> Result<Vec<KeptPart>> {
        let schema = Some(Arc::clone(&self.schema));
        let (mut parts, _) =
            make_parts(&self.planner, &self.lineage, id, Some(rows), schema).await?;
        for part in &mut parts {
            part.store = Some(id.to_string());
        }
        Ok(parts)
    }
}

/// `INSERT INTO` a kept table: the rows are sent to the workers, appended as parts of their
/// own.
#[derive(Debug)]
struct AppendSink {
    table: Weak<KeptTable>,
    schema: SchemaRef,
}

impl DisplayAs for AppendSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "AppendSink: kept table")
    }
}

#[async_trait]
impl DataSink for AppendSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let batches: Vec<RecordBatch> = data.try_collect().await?;
        let table = self
            .table
            .upgrade()
            .ok_or_else(|| exec_datafusion_err!("the kept table was dropped"))?;
        table.append(batches).await
    }
}

#[async_trait]
impl TableProvider for KeptTable {
    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.schema
            .logically_equivalent_names_and_types(&input.schema())?;
        if op != InsertOp::Append {
            return not_impl_err!("{op} not implemented for a kept table ({})", self.name);
        }
        let sink = AppendSink {
            table: self.me.clone(),
            schema: Arc::clone(&self.schema),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let me = self.me.clone();
        let scan = self.scan_node(projection.cloned())?;
        Ok(Arc::new(scan.with_read_back(Arc::new(FromHolders(me)))))
    }
}
