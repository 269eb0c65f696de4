//! Unbounded file tables (`CREATE UNBOUNDED EXTERNAL TABLE ... STORED AS CSV | JSON`) on
//! workers.
//!
//! DataFusion's scan of such a table (`StreamingTableExec`) has no serialised form: it holds
//! the file behind a private reader, and reaches our codec from datafusion-python foreign,
//! showing its name and schema only. The statement that made the table is read again here
//! ([`FileStreamSpec::from_sql`]) for what the table reads: file, encoding, header, schema and
//! order. Before a plan is serialised, the tables it scans are announced to the codec with
//! the scans' limit ([`Announced`]); the codec writes each `StreamingTableExec` as the table
//! whose columns it shows and its projection, and [`decode`] builds DataFusion's own scan of
//! that file again ([`FileStreamExec`]), which the session codec carries on to workers. The
//! file is named by its absolute path: a worker reads it where it stands.
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::stream::StreamTableFactory;
use datafusion::catalog::TableProviderFactory;
use datafusion::common::{exec_datafusion_err, exec_err, Result};
use datafusion::datasource::TableProvider;
use datafusion::execution::context::SessionContext;
use datafusion::execution::{SendableRecordBatchStream, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{
    col, CreateExternalTable, DdlStatement, Expr, LogicalPlan, SortExpr,
};
use datafusion::physical_plan::streaming::StreamingTableExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use datafusion::prelude::SessionConfig;
use prost::Message;
use serde::{Deserialize, Serialize};

const TAG: &[u8] = b"dfdpy.file-stream:";

/// What an unbounded file table reads: enough to make DataFusion's table again anywhere.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileStreamSpec {
    /// The file's absolute path.
    location: String,
    /// `"csv"` or `"json"` (DataFusion's `StreamEncoding`).
    encoding: String,
    header: bool,
    batch_size: usize,
    /// The table's schema, as datafusion-proto writes a schema.
    schema: Vec<u8>,
    /// `WITH ORDER (...)`: each ordering's columns as `(name, ascending, nulls_first)`.
    order: Vec<Vec<(String, bool, bool)>>,
}

impl FileStreamSpec {
    fn schema(&self) -> Result<SchemaRef> {
        let proto = datafusion_proto::protobuf::Schema::decode(self.schema.as_slice())
            .map_err(|e| exec_datafusion_err!("reading a stream table's schema: {e}"))?;
        Ok(Arc::new(Schema::try_from(&proto)?))
    }

    /// DataFusion's own table over the file, as its factory makes it.
    async fn table(&self) -> Result<Arc<dyn TableProvider>> {
        let order = self
            .order
            .iter()
            .map(|o| {
                o.iter()
                    .map(|(name, asc, nulls_first)| SortExpr::new(col(name), *asc, *nulls_first))
                    .collect()
            })
            .collect();
        let schema = datafusion::common::DFSchema::try_from(self.schema()?.as_ref().clone())?;
        let cmd = CreateExternalTable::builder(
            "stream",
            self.location.clone(),
            self.encoding.clone(),
            Arc::new(schema),
        )
        .with_order_exprs(order)
        .with_options(HashMap::from([(
            "format.has_header".to_string(),
            self.header.to_string(),
        )]))
        .with_unbounded(true)
        .build();
        // The factory reads the stream's batch size from the session's settings.
        let config = SessionConfig::new().with_batch_size(self.batch_size);
        let state = SessionStateBuilder::new().with_config(config).build();
        StreamTableFactory::default().create(&state, &cmd).await
    }
}

/// What `CREATE [OR REPLACE] UNBOUNDED EXTERNAL TABLE` (or `OPTIONS ('unbounded' 'true')`)
/// makes: the table's name as SQL writes it, whether the statement said `IF NOT EXISTS`, and
/// what the table reads.
pub struct Created {
    pub name: String,
    pub if_not_exists: bool,
    pub spec: FileStreamSpec,
}

impl FileStreamSpec {
    /// The table `sql` creates, planned as a session with `settings` plans it; None for any
    /// other statement, or a stream table over something else than one local CSV or JSON file.
    pub async fn from_sql(
        sql: &str,
        settings: &HashMap<String, String>,
    ) -> Result<Option<Created>> {
        let ours: HashMap<String, String> = settings
            .iter()
            .filter(|(k, _)| k.starts_with("datafusion."))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let ctx = SessionContext::new_with_config(SessionConfig::from_string_hash_map(&ours)?);
        let state = ctx.state();
        let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) =
            state.create_logical_plan(sql).await?
        else {
            return Ok(None);
        };
        let unbounded = cmd.unbounded
            || cmd.options.iter().any(|(k, v)| {
                k.eq_ignore_ascii_case("unbounded") && v.eq_ignore_ascii_case("true")
            });
        let encoding = cmd.file_type.to_ascii_lowercase();
        let [location] = cmd.locations.as_slice() else {
            return Ok(None);
        };
        if !unbounded || !matches!(encoding.as_str(), "csv" | "json") || location.contains("://") {
            return Ok(None);
        }
        let header = match cmd.options.get("format.has_header") {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => false,
        };
        let mut order = Vec::new();
        for ordering in &cmd.order_exprs {
            let mut columns = Vec::new();
            for sort in ordering {
                let Expr::Column(c) = &sort.expr else {
                    return Ok(None); // DataFusion refuses it at the scan, single-node too
                };
                columns.push((c.name.clone(), sort.asc, sort.nulls_first));
            }
            order.push(columns);
        }
        let absolute = std::path::absolute(location)
            .map_err(|e| exec_datafusion_err!("the stream table's location {location}: {e}"))?;
        let schema: Schema = cmd.schema.as_arrow().clone();
        let spec = FileStreamSpec {
            location: absolute.to_string_lossy().into_owned(),
            encoding,
            header,
            batch_size: state.config().batch_size(),
            schema: datafusion_proto::protobuf::Schema::try_from(&schema)?.encode_to_vec(),
            order,
        };
        spec.table().await?; // as DataFusion's factory accepts it
        Ok(Some(Created {
            name: cmd.name.to_quoted_string(),
            if_not_exists: cmd.if_not_exists,
            spec,
        }))
    }

    /// The spec as Python keeps it (JSON).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a spec is plain data")
    }

    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| exec_datafusion_err!("not a stream table: {e}"))
    }
}

/// The unbounded tables a plan about to be serialised scans, and the limit of its scans of
/// them (one for all: Python refuses a plan whose scans differ in it).
#[derive(Debug, Default)]
pub struct Announced {
    pub tables: Vec<FileStreamSpec>,
    pub fetch: Option<usize>,
}

/// Writes a foreign `StreamingTableExec` (datafusion-python's scan of an unbounded table) as
/// the announced table whose columns it shows, with the projection that gives them.
pub fn encode_announced(
    node: &Arc<dyn ExecutionPlan>,
    announced: &Announced,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let shown = node.schema();
    let mut matching = Vec::new();
    for spec in &announced.tables {
        let schema = spec.schema()?;
        let projection: Option<Vec<usize>> = shown
            .fields()
            .iter()
            .map(|f| {
                let (i, field) = schema.column_with_name(f.name())?;
                (field.data_type() == f.data_type()).then_some(i)
            })
            .collect();
        if let Some(projection) = projection {
            matching.push((spec, projection));
        }
    }
    let [(spec, projection)] = matching.as_slice() else {
        return exec_err!(
            "a stream table's scan ({} columns) matches {} of the unbounded tables the query reads, not one",
            shown.fields().len(),
            matching.len()
        );
    };
    let written = Written {
        spec: (*spec).clone(),
        projection: Some(projection.clone()),
        limit: announced.fetch,
    };
    write(&written, buf)
}

fn write(written: &Written, buf: &mut Vec<u8>) -> Result<()> {
    buf.extend_from_slice(TAG);
    serde_json::to_writer(&mut *buf, written)
        .map_err(|e| exec_datafusion_err!("writing a stream table's scan: {e}"))
}

/// DataFusion's scan of an unbounded file (`StreamingTableExec`), with the file it reads.
#[derive(Debug)]
pub struct FileStreamExec {
    spec: Arc<FileStreamSpec>,
    inner: Arc<dyn ExecutionPlan>,
}

impl FileStreamExec {
    fn new(spec: Arc<FileStreamSpec>, inner: Arc<dyn ExecutionPlan>) -> Self {
        Self { spec, inner }
    }

    fn scan(&self) -> Result<&StreamingTableExec> {
        self.inner
            .downcast_ref::<StreamingTableExec>()
            .ok_or_else(|| exec_datafusion_err!("a stream table's scan is {}", self.inner.name()))
    }
}

impl DisplayAs for FileStreamExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.fmt_as(t, f)
    }
}

impl ExecutionPlan for FileStreamExec {
    crate::plan_nodes::leaf_node!("FileStreamExec");

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }

    fn fetch(&self) -> Option<usize> {
        self.inner.fetch()
    }

    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        let inner = self.inner.with_fetch(limit)?;
        Some(Arc::new(Self::new(Arc::clone(&self.spec), inner)))
    }
}

/// The scan as it travels: the table, and the scan's projection and limit.
#[derive(Serialize, Deserialize)]
struct Written {
    spec: FileStreamSpec,
    projection: Option<Vec<usize>>,
    limit: Option<usize>,
}

/// Writes `node` if it is a [`FileStreamExec`].
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let node = node.downcast_ref::<FileStreamExec>()?;
    Some(node.scan().and_then(|scan| {
        let written = Written {
            spec: node.spec.as_ref().clone(),
            projection: scan.projection().as_ref().map(|p| p.to_vec()),
            limit: scan.limit(),
        };
        write(&written, buf)
    }))
}

/// The scan `buf` stands for, if it is a [`FileStreamExec`].
pub fn decode(buf: &[u8]) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let payload = buf.strip_prefix(TAG)?;
    Some((|| {
        let written: Written = serde_json::from_slice(payload)
            .map_err(|e| exec_datafusion_err!("reading a stream table's scan: {e}"))?;
        let spec = Arc::new(written.spec);
        let state = SessionStateBuilder::new().build();
        // Neither the factory nor the scan waits on anything: no runtime is needed.
        let inner = futures::executor::block_on(async {
            let table = spec.table().await?;
            table
                .scan(&state, written.projection.as_ref(), &[], written.limit)
                .await
        })?;
        Ok(Arc::new(FileStreamExec::new(spec, inner)) as Arc<dyn ExecutionPlan>)
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::physical_plan::collect;

    fn scratch() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("dfdpy-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn csv(dir: &std::path::Path) -> String {
        let path = dir.join("s.csv");
        std::fs::write(&path, "a,b\n1,x\n2,y\n3,z\n").unwrap();
        path.to_string_lossy().into_owned()
    }

    async fn spec(sql: &str) -> FileStreamSpec {
        FileStreamSpec::from_sql(sql, &HashMap::new())
            .await
            .unwrap()
            .unwrap()
            .spec
    }

    fn create(name: &str, columns: &str, path: &str) -> String {
        format!(
            "CREATE UNBOUNDED EXTERNAL TABLE {name} ({columns}) STORED AS CSV \
             WITH ORDER (a DESC) LOCATION '{path}' OPTIONS ('format.has_header' 'true')"
        )
    }

    #[tokio::test]
    async fn a_scan_travels_as_its_file_and_reads_the_same_rows() {
        let path = csv(&scratch());
        let ours = spec(&create("s", "a INT, b VARCHAR", &path)).await;
        let other = spec(&create("o", "a INT, c INT", &path)).await;
        // DataFusion's own scan, as datafusion-python's session plans it: columns b, a.
        let state = SessionStateBuilder::new().build();
        let table = ours.table().await.unwrap();
        let scan = table
            .scan(&state, Some(&vec![1, 0]), &[], None)
            .await
            .unwrap();
        assert_eq!(scan.name(), "StreamingTableExec");
        let announced = Announced {
            tables: vec![other.clone(), ours],
            fetch: Some(2),
        };
        let mut buf = Vec::new();
        encode_announced(&scan, &announced, &mut buf).unwrap();
        let read = decode(&buf).unwrap().unwrap();
        assert_eq!(read.name(), "FileStreamExec");
        assert_eq!(read.schema(), scan.schema());
        assert_eq!(read.fetch(), Some(2));
        // On to a worker: written and read again by the session codec.
        let mut again = Vec::new();
        encode(&read, &mut again).unwrap().unwrap();
        let read = decode(&again).unwrap().unwrap();
        let ctx = Arc::new(TaskContext::default());
        let rows = collect(read, ctx).await.unwrap();
        let shown = pretty_format_batches(&rows).unwrap().to_string();
        assert!(
            shown.contains("| x | 1 |") && shown.contains("| y | 2 |"),
            "{shown}"
        );
        assert!(!shown.contains('z'), "the limit travels: {shown}");
        // Two tables showing the same columns: the scan is refused, not guessed.
        let twin = spec(&create("t", "a INT, b VARCHAR", &path)).await;
        let announced = Announced {
            tables: vec![spec(&create("s", "a INT, b VARCHAR", &path)).await, twin],
            fetch: None,
        };
        let err = encode_announced(&scan, &announced, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("matches 2"), "{err}");
    }

    #[tokio::test]
    async fn other_statements_are_not_stream_tables() {
        let path = csv(&scratch());
        let bounded = format!("CREATE EXTERNAL TABLE s (a INT) STORED AS CSV LOCATION '{path}'");
        let remote = create("s", "a INT", "s3://bucket/s.csv");
        for sql in [bounded.as_str(), remote.as_str(), "SELECT 1"] {
            let created = FileStreamSpec::from_sql(sql, &HashMap::new())
                .await
                .unwrap();
            assert!(created.is_none(), "{sql}");
        }
    }
}
