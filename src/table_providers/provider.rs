//! `SnapshotTable`: a table provider over a snapshot's files, in the table's column order.
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::{FieldRef, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result, Statistics};
use datafusion::config::TableParquetOptions;
use datafusion::datasource::listing::helpers::{expr_applicable_for_cols, filter_partitioned_file};
use datafusion::datasource::physical_plan::{
    ArrowSource, AvroSource, FileGroup, FileScanConfigBuilder, FileSource, JsonSource,
    ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

use super::scan::SnapshotScanExec;
use super::snapshot::{fields_named, Snapshot, SnapshotFile};
use crate::object_stores::StoreSpec;

/// Where a table's current snapshot comes from when it follows its log (a table registered
/// without a pinned version): asked at each scan, so a commit is seen by the next query.
/// The format of a table's files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FileFormat {
    #[default]
    Parquet,
    /// Newline-delimited JSON.
    Json,
    /// Arrow IPC files (Feather v2).
    Arrow,
    Avro,
}

impl std::str::FromStr for FileFormat {
    type Err = datafusion::common::DataFusionError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "parquet" => Ok(Self::Parquet),
            "json" => Ok(Self::Json),
            "arrow" => Ok(Self::Arrow),
            "avro" => Ok(Self::Avro),
            other => datafusion::common::plan_err!("no table of {other} files"),
        }
    }
}

pub trait SnapshotSource: Send + Sync + std::fmt::Debug {
    fn files(&self) -> Result<Vec<SnapshotFile>>;
}

#[derive(Debug)]
pub struct SnapshotTable {
    /// The table's name, for plans and messages.
    name: String,
    /// Columns in the table's order (partition columns where the table has them).
    schema: SchemaRef,
    /// The columns stored in the data files, in the table's order.
    file_schema: SchemaRef,
    partition_columns: Vec<String>,
    /// Their fields, in that order.
    partition_fields: Vec<FieldRef>,
    /// Whether the files hold the partition columns (Iceberg) or the scan adds them (Delta).
    partitions_in_files: bool,
    /// The scan's column order: file columns, then the columns the scan adds (as DataFusion's
    /// file scans produce them).
    scan_schema: SchemaRef,
    /// The files now; refreshed from `source` at each scan when there is one.
    snapshot: Mutex<Arc<Snapshot>>,
    source: Option<Box<dyn SnapshotSource>>,
    /// Stores the files live on, for reading them where the session has none (single-node,
    /// through FFI, gets a bare runtime).
    stores: Vec<StoreSpec>,
    format: FileFormat,
}

impl SnapshotTable {
    pub fn new(
        name: String,
        schema: SchemaRef,
        partition_columns: Vec<String>,
        partitions_in_files: bool,
        files: &[SnapshotFile],
        source: Option<Box<dyn SnapshotSource>>,
        stores: Vec<StoreSpec>,
    ) -> Result<Self> {
        let partition_fields = fields_named(&schema, &partition_columns)?;
        let file_fields = schema
            .fields()
            .iter()
            .filter(|f| partitions_in_files || !partition_columns.contains(f.name()))
            .cloned()
            .collect::<Vec<_>>();
        let file_schema = Arc::new(Schema::new(file_fields));
        let mut scan_fields = file_schema.fields().to_vec();
        if !partitions_in_files {
            scan_fields.extend(partition_fields.iter().cloned());
        }
        let scan_schema = Schema::new(scan_fields);
        let snapshot = Snapshot::new(files, &partition_fields, !partitions_in_files, &scan_schema)?;
        Ok(Self {
            name,
            schema,
            file_schema,
            partition_columns,
            partition_fields,
            partitions_in_files,
            scan_schema: Arc::new(scan_schema),
            snapshot: Mutex::new(Arc::new(snapshot)),
            source,
            stores,
            format: FileFormat::Parquet,
        })
    }

    /// This table, its files in `format` (Parquet unless told).
    pub fn with_format(mut self, format: FileFormat) -> Self {
        self.format = format;
        self
    }

    pub fn file_count(&self) -> usize {
        self.snapshot.lock().expect("poisoned").files.len()
    }

    /// The snapshot this scan reads: the latest, for a table that follows its log.
    fn current(&self) -> Result<Arc<Snapshot>> {
        if let Some(source) = &self.source {
            let fresh = Arc::new(Snapshot::new(
                &source.files()?,
                &self.partition_fields,
                !self.partitions_in_files,
                &self.scan_schema,
            )?);
            *self.snapshot.lock().expect("poisoned") = Arc::clone(&fresh);
            return Ok(fresh);
        }
        Ok(Arc::clone(&self.snapshot.lock().expect("poisoned")))
    }

    /// The columns the scan adds after the files' own: the partition columns, unless the files
    /// hold them.
    fn added_columns(&self) -> Vec<FieldRef> {
        match self.partitions_in_files {
            true => vec![],
            false => self.partition_fields.clone(),
        }
    }
}

#[async_trait]
impl TableProvider for SnapshotTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Partition filters prune whole files; every filter is also applied above the scan
        // (Inexact), so a file read anyway never lets a row through that should not pass.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let snapshot = self.current()?;
        let projected = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => Arc::clone(&self.schema),
        };
        // Files whose partition values fail a filter on partition columns alone are skipped.
        let names = self
            .partition_columns
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>();
        let partition_filters = match names.is_empty() {
            true => Vec::new(),
            false => filters
                .iter()
                .filter(|f| expr_applicable_for_cols(&names, f))
                .cloned()
                .collect::<Vec<_>>(),
        };
        let partition_schema = DFSchema::try_from(Schema::new(self.partition_fields.clone()))?;
        let mut files = Vec::with_capacity(snapshot.files.len());
        let mut kept = Vec::with_capacity(snapshot.files.len());
        for (i, (file, values)) in snapshot.files.iter().enumerate() {
            let mut probe = file.clone();
            probe.partition_values = values.clone();
            if filter_partitioned_file(probe, &partition_filters, &partition_schema)?.is_some() {
                files.push(file.clone());
                kept.push(&snapshot.statistics[i]);
            }
        }
        if files.is_empty() {
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        // As a listing table deals its files: round-robin over `target_partitions` groups.
        let groups = state.config().target_partitions().max(1).min(files.len());
        let mut file_groups = vec![Vec::new(); groups];
        for (i, file) in files.into_iter().enumerate() {
            file_groups[i % groups].push(file);
        }
        let table_schema = TableSchema::builder(Arc::clone(&self.file_schema))
            .with_table_partition_cols(self.added_columns())
            .build();
        let source: Arc<dyn FileSource> = match self.format {
            FileFormat::Parquet => {
                let options = TableParquetOptions {
                    global: state.config_options().execution.parquet.clone(),
                    ..Default::default()
                };
                let mut source =
                    ParquetSource::new(table_schema).with_table_parquet_options(options);
                // Row groups are pruned by the filters too (statistics, bloom filters).
                if let Some(predicate) = conjunction(filters.iter().cloned()) {
                    let df_schema = DFSchema::try_from(Arc::clone(&self.scan_schema))?;
                    // Built here, not by `state` (a foreign session would build it on the
                    // other side of FFI, where it cannot be serialised).
                    let props = ExecutionProps::new();
                    let planning = Default::default();
                    if let Ok(physical) =
                        create_physical_expr(&predicate, &df_schema, &props, &planning)
                    {
                        source = source.with_predicate(physical);
                    }
                }
                Arc::new(source)
            }
            FileFormat::Json => Arc::new(JsonSource::new(table_schema)),
            FileFormat::Arrow => Arc::new(ArrowSource::new_file_source(table_schema)),
            FileFormat::Avro => Arc::new(AvroSource::new(table_schema)),
        };
        let scan_schema = Arc::clone(&self.scan_schema);
        // The scan reads the projected columns in scan order; a projection puts them in the
        // table's order.
        let wanted: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let in_scan: Vec<usize> = wanted
            .iter()
            .map(|&i| scan_schema.index_of(self.schema.field(i).name()))
            .collect::<std::result::Result<_, _>>()?;
        let mut scan_indices = in_scan.clone();
        scan_indices.sort_unstable();
        // The log's row counts, as a listing table reads them from footers, and its column
        // bounds as estimates: they size joins' sides, filters' selectivity and the
        // distributed planner's tasks.
        let statistics = Statistics::try_merge_iter(kept, &scan_schema)?;
        let config = FileScanConfigBuilder::new(snapshot.store.clone(), source)
            .with_statistics(statistics)
            .with_file_groups(file_groups.into_iter().map(FileGroup::new).collect())
            .with_projection_indices(Some(scan_indices.clone()))?
            .with_limit(limit)
            .build();
        let mut plan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
        if scan_indices != in_scan {
            let exprs = in_scan
                .iter()
                .map(|i| {
                    let at = scan_indices.binary_search(i).expect("projected above");
                    let name = scan_schema.field(*i).name().clone();
                    let col: Arc<dyn PhysicalExpr> = Arc::new(Column::new(&name, at));
                    (col, name)
                })
                .collect::<Vec<_>>();
            plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
        }
        Ok(Arc::new(SnapshotScanExec::new(
            self.name.clone(),
            plan,
            self.stores.clone(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{RecordBatch, StringArray};
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::table_providers::test_support::partitioned_table;

    #[tokio::test]
    async fn reads_exactly_the_snapshot_in_the_tables_column_order() {
        let (table, dir) = partitioned_table();
        let ctx = SessionContext::new();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let df = ctx.sql("SELECT * FROM t ORDER BY k").await.unwrap();
        let batches = df.collect().await.unwrap();
        let names: Vec<_> = batches[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["k", "p", "v"]);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 6, "the removed file is not part of the snapshot");
        let p = batches[0]
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!((p.value(0), p.value(5)), ("a", "b"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
