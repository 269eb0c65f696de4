//! `InMemoryTable`: rows a Python table function returned (a pyarrow table or in-memory
//! dataset), as a table whose scan travels with its rows, as an in-memory table's scan does.
//!
//! datafusion-python scans such results through pyarrow, in this process; held by DataFusion's
//! own `MemTable` instead, the scan is an ordinary memory scan, wrapped in a
//! [`SnapshotScanExec`] so that it crosses FFI whole and `codec::WireCodec` writes it.
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::Result;
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::scan::SnapshotScanExec;

#[derive(Debug)]
pub struct InMemoryTable {
    name: String,
    rows: MemTable,
}

impl InMemoryTable {
    pub fn try_new(name: String, schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<Self> {
        let rows = MemTable::try_new(schema, vec![batches])?;
        Ok(Self { name, rows })
    }
}

#[async_trait]
impl TableProvider for InMemoryTable {
    fn schema(&self) -> SchemaRef {
        self.rows.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let scan = self.rows.scan(state, projection, filters, limit).await?;
        Ok(Arc::new(SnapshotScanExec::new(
            self.name.clone(),
            scan,
            vec![],
        )))
    }
}
