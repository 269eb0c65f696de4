//! `KeptScanExec`: reads a kept table's parts where they are held, or frees them there.
//!
//! The coordinator splits a scan into one task per holder (`task_count`, `scale_up`) and
//! sends each task to its holder (`route_tasks`); a worker reads its parts from its own store.
//! On the coordinator (single-node `ctx.sql` over a kept table) a part the process does not
//! hold is read back from its holder by a query of its own ([`ReadBack`]).
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::common::stats::Precision;
use datafusion::common::{exec_datafusion_err, Result, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion_distributed::{
    DistributedLeafExec, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::part::KeptPart;
use super::store;

const TAG: &[u8] = b"dfdpy.kept-scan:";

/// What the node does with the parts it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Their rows.
    Read,
    /// Frees every part of the table the process holds; one row: parts and bytes freed.
    Free,
}

/// Reads parts this process does not hold from their holders (the coordinator's side).
pub trait ReadBack: Send + Sync + fmt::Debug {
    fn read(&self, scan: KeptScanExec) -> Result<SendableRecordBatchStream>;
}

#[derive(Clone, Debug)]
pub struct KeptScanExec {
    pub table: Uuid,
    /// The table's name, for plans and messages.
    pub name: String,
    pub op: Op,
    /// The table's columns (for `Read`).
    pub table_schema: SchemaRef,
    pub projection: Option<Vec<usize>>,
    /// One partition each (`Read`); for `Free`, one per worker to free on.
    pub parts: Vec<KeptPart>,
    pub read_back: Option<Arc<dyn ReadBack>>,
    properties: Arc<PlanProperties>,
}

fn freed_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("parts", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
    ]))
}

impl KeptScanExec {
    pub fn new(
        table: Uuid,
        name: String,
        op: Op,
        table_schema: SchemaRef,
        projection: Option<Vec<usize>>,
        parts: Vec<KeptPart>,
    ) -> Result<Self> {
        let schema = match (op, &projection) {
            (Op::Free, _) => freed_schema(),
            (Op::Read, Some(p)) => Arc::new(table_schema.project(p)?),
            (Op::Read, None) => Arc::clone(&table_schema),
        };
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(parts.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(Self {
            table,
            name,
            op,
            table_schema,
            projection,
            parts,
            read_back: None,
            properties: Arc::new(properties),
        })
    }

    pub fn with_read_back(mut self, read_back: Arc<dyn ReadBack>) -> Self {
        self.read_back = Some(read_back);
        self
    }

    /// The same scan over `parts`.
    pub fn over(&self, parts: Vec<KeptPart>) -> Result<Self> {
        let mut scan = Self::new(
            self.table,
            self.name.clone(),
            self.op,
            Arc::clone(&self.table_schema),
            self.projection.clone(),
            parts,
        )?;
        scan.read_back = self.read_back.clone();
        Ok(scan)
    }

    /// What `parts` hold, as the tasks that kept them counted it (or this process, for rows
    /// it holds whole: an in-memory table's, an insert's): their rows exactly, their bytes
    /// in memory (in proportion to the columns read). The planner sizes joins and stages
    /// from these (a kept table is built from or probed as its size says), and answers
    /// `count(*)`.
    fn statistics_of(&self, parts: &[KeptPart]) -> Statistics {
        let schema = self.schema();
        let mut stats = Statistics::new_unknown(&schema);
        if self.op != Op::Read {
            return stats;
        }
        let rows: u64 = parts.iter().map(|p| p.rows).sum();
        let bytes: u64 = parts.iter().map(|p| p.bytes).sum();
        let columns = self.table_schema.fields().len().max(1) as u64;
        let read = schema.fields().len() as u64;
        stats.num_rows = Precision::Exact(rows as usize);
        stats.total_byte_size = Precision::Inexact((bytes * read / columns) as usize);
        stats
    }

    /// The distinct workers holding its parts, in order of first appearance.
    fn holders(&self) -> Vec<Option<String>> {
        let mut seen = Vec::new();
        for p in &self.parts {
            if !seen.contains(&p.holder) {
                seen.push(p.holder.clone());
            }
        }
        seen
    }

    fn read_local(&self, partition: usize) -> Option<Result<Vec<RecordBatch>>> {
        let Some(part) = self.parts.get(partition) else {
            return Some(Ok(vec![])); // the empty partition of a table without parts
        };
        let batches = store::get(part.store_id(self.table), (part.task, part.partition))?;
        Some(batches.and_then(|batches| {
            match &self.projection {
                Some(p) => batches
                    .iter()
                    .map(|b| b.project(p).map_err(Into::into))
                    .collect(),
                None => Ok(batches),
            }
        }))
    }
}

/// The tasks a kept scan wants: one per worker holding its parts.
pub fn task_count(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let scan = plan.downcast_ref::<KeptScanExec>()?;
    Some(scan.holders().len().max(1))
}

/// One variant per task, each over one holder's parts (padded to the same partition count
/// with empty partitions, as the leaf's variants must agree).
pub fn scale_up(ev: ScaleUpLeafNodeEvent) -> Option<Result<ScaleUpLeafNodeEventResponse>> {
    let scan = ev.plan.downcast_ref::<KeptScanExec>()?;
    let holders = scan.holders();
    let tasks = ev.task_count.max(1);
    let mut groups: Vec<Vec<KeptPart>> = vec![Vec::new(); tasks];
    for part in &scan.parts {
        let i = holders.iter().position(|h| *h == part.holder).unwrap_or(0);
        groups[i % tasks].push(part.clone());
    }
    let width = groups.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let variants: Result<Vec<Arc<dyn ExecutionPlan>>> = groups
        .into_iter()
        .map(|mut g| {
            let holder = g.first().and_then(|p| p.holder.clone());
            while g.len() < width {
                // A part of no rows that no store holds: read as empty (see `execute`).
                g.push(KeptPart {
                    task: u32::MAX,
                    partition: u32::MAX,
                    rows: 0,
                    bytes: 0,
                    on_disk: false,
                    process: String::new(),
                    holder: holder.clone(),
                    store: None,
                });
            }
            Ok(Arc::new(scan.over(g)?) as Arc<dyn ExecutionPlan>)
        })
        .collect();
    let leaf = variants.and_then(|v| DistributedLeafExec::try_new(Arc::clone(ev.plan), v));
    Some(leaf.map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))))
}

/// The worker holding the kept parts read in `plan`'s stage (the task running it was sent
/// there, see [`route_tasks`]), if it reads any.
pub fn holder_read_in(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    let mut pending = vec![plan];
    while let Some(node) = pending.pop() {
        if let Some(scan) = node.downcast_ref::<KeptScanExec>() {
            if let Some(holder) = scan.parts.iter().find_map(|p| p.holder.clone()) {
                return Some(holder);
            }
        }
        if node.name().starts_with("Network") {
            continue;
        }
        pending.extend(node.children());
    }
    None
}

#[derive(Serialize, Deserialize)]
struct Encoded {
    table: String,
    name: String,
    op: Op,
    projection: Option<Vec<usize>>,
    parts: Vec<KeptPart>,
}

pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let scan = node.downcast_ref::<KeptScanExec>()?;
    Some((|| {
        let head = serde_json::to_vec(&Encoded {
            table: scan.table.to_string(),
            name: scan.name.clone(),
            op: scan.op,
            projection: scan.projection.clone(),
            parts: scan.parts.clone(),
        })
        .map_err(|e| exec_datafusion_err!("encoding a kept scan: {e}"))?;
        buf.extend_from_slice(TAG);
        buf.extend_from_slice(&(head.len() as u64).to_le_bytes());
        buf.extend_from_slice(&head);
        // The schema as an IPC stream of no batches.
        let mut writer = StreamWriter::try_new(&mut *buf, &scan.table_schema)?;
        writer.finish()?;
        Ok(())
    })())
}

pub fn decode(buf: &[u8]) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let rest = buf.strip_prefix(TAG)?;
    Some((|| {
        let bad = || exec_datafusion_err!("not a kept scan");
        let (len, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
        let len = u64::from_le_bytes(*len) as usize;
        let (head, schema) = (rest.get(..len).ok_or_else(bad)?, &rest[len..]);
        let e: Encoded = serde_json::from_slice(head).map_err(|_| bad())?;
        let schema = StreamReader::try_new(schema, None)?.schema();
        let table = Uuid::parse_str(&e.table).map_err(|_| bad())?;
        let scan = KeptScanExec::new(table, e.name, e.op, schema, e.projection, e.parts)?;
        Ok(Arc::new(scan) as _)
    })())
}

impl DisplayAs for KeptScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let mut by_holder: BTreeMap<&str, usize> = BTreeMap::new();
        for p in self
            .parts
            .iter()
            .filter(|p| p.rows > 0 || p.task != u32::MAX)
        {
            *by_holder
                .entry(p.holder.as_deref().unwrap_or("coordinator"))
                .or_default() += 1;
        }
        let held: Vec<String> = by_holder
            .iter()
            .map(|(h, n)| format!("{}: {n}", h.trim_end_matches('/')))
            .collect();
        let what = match self.op {
            Op::Read => "KeptScanExec",
            Op::Free => "KeptScanExec (free)",
        };
        write!(
            f,
            "{what}: table={}, parts=[{}]",
            self.name,
            held.join(", ")
        )
    }
}

impl ExecutionPlan for KeptScanExec {
    crate::plan_nodes::leaf_node!("KeptScanExec");

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn partition_statistics(&self, partition: Option<usize>) -> Result<Arc<Statistics>> {
        let parts = match partition {
            None => &self.parts[..],
            Some(i) => self.parts.get(i..=i).unwrap_or_default(),
        };
        Ok(Arc::new(self.statistics_of(parts)))
    }

    fn execute(
        &self,
        partition: usize,
        _ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        if self.op == Op::Free {
            let (parts, bytes) = store::free(self.table);
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(UInt64Array::from(vec![parts])),
                    Arc::new(UInt64Array::from(vec![bytes])),
                ],
            )?;
            let once = futures::stream::once(async move { Ok(batch) });
            return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, once)));
        }
        let padding = self
            .parts
            .get(partition)
            .is_some_and(|p| p.task == u32::MAX);
        let local = if padding {
            Some(Ok(vec![]))
        } else {
            self.read_local(partition)
        };
        match (local, &self.read_back) {
            (Some(batches), _) => {
                let batches = batches?;
                let stream = futures::stream::iter(batches.into_iter().map(Ok));
                Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
            }
            (None, Some(read_back)) => {
                let part = self.parts[partition].clone();
                read_back.read(self.over(vec![part])?)
            }
            (None, None) => {
                let part = &self.parts[partition];
                Err(exec_datafusion_err!(
                    "{}: part {}.{} of kept table {} ({}) is not held here",
                    super::MISSING,
                    part.task,
                    part.partition,
                    self.name,
                    self.table
                ))
            }
        }
    }
}

/// Rows of a `Free` run: parts and bytes freed, added up.
pub fn freed(batches: &[RecordBatch]) -> (u64, u64) {
    let mut sum = (0, 0);
    for b in batches {
        let col = |i: usize| b.column(i).as_any().downcast_ref::<UInt64Array>().cloned();
        if let (Some(p), Some(by)) = (col(0), col(1)) {
            sum.0 += p.iter().flatten().sum::<u64>();
            sum.1 += by.iter().flatten().sum::<u64>();
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::SessionConfig;
    use datafusion_distributed::ScaleUpLeafNodeEvent;

    use super::*;

    fn part(task: u32, holder: &str) -> KeptPart {
        KeptPart {
            task,
            partition: 0,
            rows: 10,
            bytes: 80,
            on_disk: false,
            process: "p".into(),
            holder: Some(holder.into()),
            store: None,
        }
    }

    fn scan(parts: Vec<KeptPart>) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let scan = KeptScanExec::new(Uuid::new_v4(), "t".into(), Op::Read, schema, None, parts);
        Arc::new(scan.unwrap())
    }

    #[test]
    #[allow(deprecated)] // a leaf's own statistics, as DataFusion 55's planner reads them
    fn its_statistics_are_the_parts_counts() {
        let plan = scan(vec![part(0, "http://a:1/"), part(1, "http://b:1/")]);
        let all = plan.partition_statistics(None).unwrap();
        assert_eq!(all.num_rows, Precision::Exact(20));
        assert_eq!(all.total_byte_size, Precision::Inexact(160));
        let one = plan.partition_statistics(Some(1)).unwrap();
        assert_eq!(one.num_rows, Precision::Exact(10));
        // Rows held whole by the coordinator are counted too.
        let held = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        let with_whole = scan(vec![part(0, "http://a:1/"), KeptPart::whole(None, &[held])]);
        let counted = with_whole.partition_statistics(None).unwrap();
        assert_eq!(counted.num_rows, Precision::Exact(13));
    }

    #[test]
    fn travels_as_the_reference_it_is() {
        let plan = scan(vec![part(0, "http://a:1/"), part(1, "http://b:1/")]);
        let mut buf = Vec::new();
        encode(&plan, &mut buf).unwrap().unwrap();
        let back = decode(&buf).unwrap().unwrap();
        let (a, b) = (
            plan.downcast_ref::<KeptScanExec>().unwrap(),
            back.downcast_ref::<KeptScanExec>().unwrap(),
        );
        assert_eq!(
            (a.table, &a.name, a.schema()),
            (b.table, &b.name, b.schema())
        );
        assert_eq!(b.parts.len(), 2);
        assert!(buf.len() < 1_000, "{} bytes", buf.len());
    }

    #[test]
    fn each_task_reads_one_holder_s_parts_and_is_sent_there() {
        let plan = scan(vec![
            part(0, "http://a:1/"),
            part(1, "http://b:1/"),
            part(2, "http://a:1/"),
        ]);
        assert_eq!(task_count(&plan), Some(2));
        let config = SessionConfig::new();
        let ev = ScaleUpLeafNodeEvent {
            plan: &plan,
            task_count: 2,
            session_config: &config,
        };
        let Some(Ok(response)) = scale_up(ev) else {
            panic!("a kept scan is split by holder");
        };
        let leaf = response.plan.downcast_ref::<DistributedLeafExec>().unwrap();
        let urls = super::super::routing::holders_of(leaf.variants())
            .unwrap()
            .unwrap();
        let urls: Vec<&str> = urls.iter().map(url::Url::as_str).collect();
        assert_eq!(urls, ["http://a:1/", "http://b:1/"]);
        // Variants agree on partitions: the one-part holder's is padded with an empty one.
        let widths: Vec<usize> = leaf
            .variants()
            .iter()
            .map(|v| v.properties().partitioning.partition_count())
            .collect();
        assert_eq!(widths, [2, 2]);
    }
}
