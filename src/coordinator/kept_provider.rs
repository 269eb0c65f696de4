//! A kept table as its session sees it: a table provider whose scans read the parts where
//! they are held (single-node reads them back through a query of its own), and whose
//! `insert_into` appends (`kept_append`).
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{not_impl_err, Result, SchemaExt};
use datafusion::datasource::TableType;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use super::kept_append::AppendExec;
use super::kept_table::KeptTable;

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
        Ok(Arc::new(self.read_here(projection.cloned())?))
    }
}
