//! `INSERT INTO` a kept table: every row of the input appended as parts of their own, made
//! visible at once when all of them are held, or not at all.
//!
//! Two ways in:
//! * `DistributedContext.sql` runs the input on the workers ([`KeptTable::append_query`]):
//!   each task of its last stage keeps its rows where it ran (`KeepExec`, cast to the table's
//!   schema and its non-null columns checked), under a store id of the insert's own; no row
//!   passes through the coordinator. [`InsertProvider`] is that run as a table whose scan
//!   runs it, so the statement stays lazy as single-node's DML frame is.
//! * `SessionContext.sql` plans the input single-node and hands it to the table's
//!   `insert_into`: [`AppendExec`] reads every partition of it (DataFusion's own sink reads
//!   one, and the optimizer cannot see through the FFI boundary to merge them first) and
//!   sends the rows to the workers ([`KeptTable::append_rows`]).
//!
//! Either way the new parts join the table under its state lock in one step, so a reader sees
//! the table before or after the insert; an insert that fails or is cancelled frees what its
//! tasks kept, and the table stays as it was.
use std::fmt;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
};
use futures::TryStreamExt;
use uuid::Uuid;

use super::kept_table::{free_everywhere, AppendSource, Appended, KeptTable};
use super::lineage::Sources;
use super::planner::PlanRequest;
use crate::kept::conform;
use crate::plan_nodes::one_partition;
use crate::runtime;

impl KeptTable {
    /// Appends `rows` (computed here) to the table: sent to the workers, and held here too.
    pub async fn append_rows(&self, rows: Vec<RecordBatch>) -> Result<u64> {
        self.append(Pending::Rows(rows)).await
    }

    /// Appends the rows of `request`'s query, run on the workers and kept where its tasks
    /// compute them.
    pub async fn append_query(&self, request: &PlanRequest) -> Result<u64> {
        self.append(Pending::Query(Arc::new(request.detached())))
            .await
    }

    async fn append(&self, pending: Pending) -> Result<u64> {
        let id = Uuid::new_v4();
        let uncommitted = Uncommitted(Some((self.planner.clone(), self.lineage.clone(), id)));
        let joins = self.state.lock().expect("poisoned").parts.clone();
        let made = match pending {
            Pending::Rows(rows) => {
                let source = AppendSource::Rows(rows);
                let made = self.make_appended(id, &source, None, &joins).await;
                made.map(|(parts, _)| (parts, source))
            }
            Pending::Query(request) => {
                let source = AppendSource::Query(Arc::clone(&request), Sources::default());
                let made = self.make_appended(id, &source, None, &joins).await;
                made.map(|(parts, sources)| (parts, AppendSource::Query(request, sources)))
            }
        };
        let (parts, source) = made.map_err(|e| {
            exec_datafusion_err!(
                "INSERT INTO {} failed, and the table is unchanged: {e}",
                self.name
            )
        })?;
        let rows = parts.iter().map(|p| p.rows).sum();
        let mut state = self.state.lock().expect("poisoned");
        if state.retired {
            return Err(exec_datafusion_err!(
                "kept table {} was rewritten (DELETE or UPDATE) while this INSERT ran; nothing \
                 was inserted (run it again)",
                self.name
            ));
        }
        state.parts.extend(parts);
        state.appended.push(Appended { id, source });
        uncommitted.commit();
        Ok(rows)
    }
}

/// An insert's rows before they are kept.
enum Pending {
    Rows(Vec<RecordBatch>),
    Query(Arc<PlanRequest>),
}

/// What an insert's tasks kept, freed everywhere unless the insert commits: it failed, or
/// its caller stopped waiting (Ctrl-C).
struct Uncommitted(Option<(Arc<super::ClusterPlanner>, Arc<PlanRequest>, Uuid)>);

impl Uncommitted {
    fn commit(mut self) {
        self.0 = None;
    }
}

impl Drop for Uncommitted {
    fn drop(&mut self) {
        if let Some((planner, lineage, id)) = self.0.take() {
            runtime::handle().spawn(async move { free_everywhere(&planner, &lineage, id).await });
        }
    }
}

/// The schema of a DML statement's result, as DataFusion's sinks give it.
fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

fn count_batch(rows: u64) -> Result<RecordBatch> {
    let rows = Arc::new(UInt64Array::from(vec![rows]));
    Ok(RecordBatch::try_new(count_schema(), vec![rows])?)
}

fn one_partition_properties(schema: SchemaRef) -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// `SessionContext.sql`'s INSERT: every partition of the single-node input, appended.
///
/// Its name carries the table's id ([`APPEND_EXEC`]): the FFI boundary passes a node's name
/// on, so the Python side tells from the physical plan of an `INSERT` which kept table the
/// session resolved its target to (see `kept_dml.py`).
#[derive(Debug)]
pub struct AppendExec {
    table: Weak<KeptTable>,
    name: String,
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

/// How an [`AppendExec`]'s name starts; the table's id follows.
pub const APPEND_EXEC: &str = "AppendExec: kept table ";

impl AppendExec {
    pub fn new(table: Weak<KeptTable>, input: Arc<dyn ExecutionPlan>) -> Self {
        let id = table
            .upgrade()
            .map(|t| t.id.to_string())
            .unwrap_or_default();
        Self {
            table,
            name: format!("{APPEND_EXEC}{id}"),
            input,
            properties: one_partition_properties(count_schema()),
        }
    }
}

impl DisplayAs for AppendExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.name)
    }
}

impl ExecutionPlan for AppendExec {
    fn name(&self) -> &str {
        &self.name
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    crate::plan_nodes::no_expressions!();

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = crate::plan_nodes::only(&children, "AppendExec")?;
        Ok(Arc::new(Self::new(self.table.clone(), input)))
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        one_partition(partition, "AppendExec")?;
        let table = self.table.clone();
        let parts = self.input.output_partitioning().partition_count();
        let streams = (0..parts)
            .map(|p| self.input.execute(p, Arc::clone(&ctx)))
            .collect::<Result<Vec<_>>>()?;
        let appended = futures::stream::once(async move {
            let rows: Vec<RecordBatch> = futures::stream::select_all(streams).try_collect().await?;
            let table = table
                .upgrade()
                .ok_or_else(|| exec_datafusion_err!("the kept table was dropped"))?;
            // Cast to the table's columns and their non-null columns checked, as DataFusion's
            // own sinks do.
            let rows = rows
                .into_iter()
                .map(|b| conform(b, &table.schema))
                .collect::<Result<Vec<_>>>()?;
            count_batch(table.append_rows(rows).await?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            count_schema(),
            appended,
        )))
    }
}

/// `DistributedContext.sql`'s INSERT as a table of one row, the count: each scan of it runs
/// the insert once, as each run of single-node's DML frame does.
pub struct InsertProvider {
    table: Arc<KeptTable>,
    request: Arc<PlanRequest>,
}

impl fmt::Debug for InsertProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InsertProvider({})", self.table.name)
    }
}

impl fmt::Debug for InsertExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InsertExec({})", self.table.name)
    }
}

impl InsertProvider {
    pub fn new(table: Arc<KeptTable>, request: PlanRequest) -> Self {
        Self {
            table,
            request: Arc::new(request),
        }
    }
}

#[async_trait]
impl TableProvider for InsertProvider {
    fn schema(&self) -> SchemaRef {
        count_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(p) => Arc::new(count_schema().project(p)?),
            None => count_schema(),
        };
        Ok(Arc::new(InsertExec {
            table: Arc::clone(&self.table),
            request: Arc::clone(&self.request),
            properties: one_partition_properties(Arc::clone(&schema)),
            schema,
        }))
    }
}

/// Runs a distributed insert, then gives its count.
struct InsertExec {
    table: Arc<KeptTable>,
    request: Arc<PlanRequest>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl DisplayAs for InsertExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "InsertExec: kept table {}", self.table.name)
    }
}

impl ExecutionPlan for InsertExec {
    crate::plan_nodes::leaf_node!("InsertExec");

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        partition: usize,
        _ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        one_partition(partition, "InsertExec")?;
        let (table, request) = (Arc::clone(&self.table), Arc::clone(&self.request));
        let schema = Arc::clone(&self.schema);
        let out = Arc::clone(&schema);
        let inserted = futures::stream::once(async move {
            let rows = table.append_query(&request).await?;
            let batch = count_batch(rows)?;
            Ok(match out.fields().is_empty() {
                true => RecordBatch::try_new_with_options(
                    out,
                    vec![],
                    &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
                )?,
                false => batch,
            })
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, inserted)))
    }
}
