//! Compression given back to CSV and NDJSON scans.
//!
//! datafusion-python's plan bytes leave a file scan's compression out (its protobuf message
//! has no field for it), so a gzip table decoded here was read as plain text. The tables'
//! logical scans, which datafusion-python serialises with their format options, are sent
//! beside the plan: each compressed table's scans get its compression back.
//!
//! Upstream: datafusion-datasource-csv 55.2.0 `CsvSource::try_from_proto` ("The compression
//! type is not on the wire"), the same for NDJSON.
use std::sync::Arc;

use datafusion::common::config::{CsvOptions, JsonOptions};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{internal_datafusion_err, Result};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::protobuf::listing_table_scan_node::FileFormatType;
use datafusion_proto::protobuf::logical_plan_node::LogicalPlanType;
use datafusion_proto::protobuf::LogicalPlanNode;
use prost::Message;

/// A listing table whose files are compressed: where they are, their format, the codec.
#[derive(Clone, Debug)]
pub struct CompressedTable {
    urls: Vec<ListingTableUrl>,
    file_type: &'static str,
    compression: FileCompressionType,
}

impl CompressedTable {
    /// The compressed table a logical scan (datafusion-python's `LogicalPlan.to_bytes()` of a
    /// `TableScan`) reads, if it reads one.
    pub fn from_logical_scan(bytes: &[u8]) -> Result<Option<Self>> {
        let node = LogicalPlanNode::decode(bytes)
            .map_err(|e| internal_datafusion_err!("a table scan's bytes do not decode: {e}"))?;
        let Some(LogicalPlanType::ListingScan(scan)) = node.logical_plan_type else {
            return Ok(None);
        };
        let (file_type, compression) = match &scan.file_format_type {
            Some(FileFormatType::Csv(csv)) => match &csv.options {
                Some(o) => ("csv", CsvOptions::try_from(o)?.compression),
                None => return Ok(None),
            },
            Some(FileFormatType::Json(json)) => match &json.options {
                Some(o) => ("json", JsonOptions::try_from(o)?.compression),
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let compression = FileCompressionType::from(compression);
        if !compression.is_compressed() {
            return Ok(None);
        }
        let urls = scan
            .paths
            .iter()
            .map(ListingTableUrl::parse)
            .collect::<Result<_>>()?;
        Ok(Some(Self {
            urls,
            file_type,
            compression,
        }))
    }

    /// Whether `scan` reads this table: its format, and every file under one of its paths.
    fn reads(&self, scan: &FileScanConfig) -> bool {
        let mut files = scan
            .file_groups
            .iter()
            .flat_map(|group| group.files())
            .peekable();
        scan.file_source.file_type() == self.file_type
            && files.peek().is_some()
            && files.all(|file| {
                self.urls.iter().any(|url| {
                    url.object_store() == scan.object_store_url && url.contains(file.path(), false)
                })
            })
    }
}

/// `plan` with each scan of a compressed table reading it compressed.
pub fn restore_compression(
    plan: Arc<dyn ExecutionPlan>,
    tables: &[CompressedTable],
) -> Result<Arc<dyn ExecutionPlan>> {
    if tables.is_empty() {
        return Ok(plan);
    }
    let restored = plan.transform_up(|node| {
        let Some(scan) = file_scan(&node) else {
            return Ok(Transformed::no(node));
        };
        let table = tables.iter().find(|t| t.reads(scan));
        Ok(match table {
            Some(t) if scan.file_compression_type != t.compression => {
                let mut scan = scan.clone();
                scan.file_compression_type = t.compression;
                Transformed::yes(DataSourceExec::from_data_source(scan) as Arc<dyn ExecutionPlan>)
            }
            _ => Transformed::no(node),
        })
    })?;
    Ok(restored.data)
}

fn file_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<&FileScanConfig> {
    plan.downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref()
}
