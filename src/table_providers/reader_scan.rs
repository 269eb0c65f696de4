//! `ReaderTable`: a table read through its format's own reader, one stream of batches in
//! this process (pyiceberg's, which applies delete files and matches columns by field id).
//!
//! It answers single-node faithfully; its scan has no serialised form, so a distributed query
//! over it runs on the coordinator, with the reason its registration recorded.
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchReader};
use datafusion::catalog::Session;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;

/// Opens a new read of the whole table (each scan reads it once).
pub trait BatchSource: Send + Sync + fmt::Debug {
    fn open(&self) -> Result<Box<dyn RecordBatchReader + Send>>;
}

#[derive(Debug)]
pub struct ReaderTable {
    name: String,
    schema: SchemaRef,
    source: Arc<dyn BatchSource>,
}

impl ReaderTable {
    pub fn new(name: String, schema: SchemaRef, source: Arc<dyn BatchSource>) -> Self {
        Self {
            name,
            schema,
            source,
        }
    }
}

#[async_trait]
impl TableProvider for ReaderTable {
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
        let projection = projection.cloned();
        let schema = match &projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => Arc::clone(&self.schema),
        };
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(Arc::new(ReaderScanExec {
            schema: Arc::clone(&schema),
            table: self.name.clone(),
            source: Arc::clone(&self.source),
            projection,
            properties,
        }))
    }
}

#[derive(Debug)]
struct ReaderScanExec {
    schema: SchemaRef,
    table: String,
    source: Arc<dyn BatchSource>,
    projection: Option<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl DisplayAs for ReaderScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ReaderScanExec: table={}", self.table)
    }
}

impl ExecutionPlan for ReaderScanExec {
    crate::plan_nodes::leaf_node!("ReaderScanExec");

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let source = Arc::clone(&self.source);
        let projection = self.projection.clone();
        // The reader blocks (it may call into Python): it runs on a blocking thread, and its
        // batches come through a channel.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
        tokio::task::spawn_blocking(move || {
            let reader = match source.open() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            };
            for batch in reader {
                let batch = batch
                    .map_err(|e| exec_datafusion_err!("reading the table: {e}"))
                    .and_then(|b| match &projection {
                        Some(p) => b.project(p).map_err(Into::into),
                        None => Ok(b),
                    });
                if tx.blocking_send(batch).is_err() {
                    return; // the scan was dropped
                }
            }
        });
        let stream =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream.boxed(),
        )))
    }
}
