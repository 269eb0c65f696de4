//! A kept table as its session sees it: a table provider whose scans read the parts where
//! they are held (single-node reads them back through a query of its own), and whose
//! `insert_into` appends (`kept_append`).
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{exec_datafusion_err, not_impl_err, Result, SchemaExt};
use datafusion::datasource::TableType;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::ExecutionPlan;
use futures::TryStreamExt;

use super::kept_append::AppendExec;
use super::kept_table::{internal_request, stream, AppendSource, Appended, KeptTable};
use crate::kept::{KeptScanExec, ReadBack};

/// Reads a part the coordinator does not hold from its holder, by a query of its own.
#[derive(Debug)]
pub(super) struct FromHolders(pub(super) Weak<KeptTable>);

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
        Ok(Arc::new(AppendExec::new(self.me.clone(), input)))
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
