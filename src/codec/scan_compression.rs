//! A file scan's compression, which DataFusion 55's plan encoding leaves out, carried beside it.
//!
//! A CSV or NDJSON scan's protobuf message has no compression field, so a worker decoded a
//! gzip scan as plain text. Before a fragment is encoded, each compressed scan is wrapped in a
//! `ScanCompression` node (`operators::ScanCompression`: the scan as its child, encoded as
//! usual) that the session codec writes as the compression's name; decoding gives back the
//! scan itself, its compression set.
//!
//! Upstream: datafusion-datasource-csv 55.2.0 `CsvSource::try_from_proto` ("The compression
//! type is not on the wire"), the same for NDJSON.
use std::str::FromStr;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{internal_err, Result};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::physical_plan::{FileScanConfig, FileScanConfigBuilder};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::ExecutionPlan;

use crate::operators::ScanCompression;
use crate::plan_nodes::only;

/// What starts an encoded `ScanCompression` (the session codec's other nodes are datafusion-
/// python's, which never start so).
const TAG: &[u8] = b"dfdpy.scan-compression:";

fn compressed(plan: &Arc<dyn ExecutionPlan>) -> Option<FileCompressionType> {
    let scan: &FileScanConfig = plan
        .downcast_ref::<DataSourceExec>()?
        .data_source()
        .downcast_ref()?;
    let compression = scan.file_compression_type;
    compression.is_compressed().then_some(compression)
}

/// `plan` with each compressed file scan wrapped, ready to be encoded.
pub fn wrap(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let wrapped = plan.transform_up(|node| {
        Ok(match compressed(&node) {
            Some(compression) => Transformed::yes(
                Arc::new(ScanCompression::new(node, compression)) as Arc<dyn ExecutionPlan>,
            ),
            None => Transformed::no(node),
        })
    })?;
    Ok(wrapped.data)
}

/// Writes `node` if it is a `ScanCompression`.
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let node = node.downcast_ref::<ScanCompression>()?;
    buf.extend_from_slice(TAG);
    buf.extend_from_slice(node.compression().get_variant().to_string().as_bytes());
    Some(Ok(()))
}

/// The scan `buf` and its decoded child stand for, if `buf` is a `ScanCompression`.
pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let name = buf.strip_prefix(TAG)?;
    Some(with_compression(name, inputs))
}

fn with_compression(
    name: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Result<Arc<dyn ExecutionPlan>> {
    let compression = FileCompressionType::from_str(&String::from_utf8_lossy(name))?;
    let scan = only(inputs, "ScanCompression")?;
    let Some(config) = scan
        .downcast_ref::<DataSourceExec>()
        .and_then(|s| s.data_source().downcast_ref::<FileScanConfig>())
    else {
        return internal_err!(
            "a scan's compression came with a {} plan, not a file scan",
            scan.name()
        );
    };
    let config = FileScanConfigBuilder::from(config.clone())
        .with_file_compression_type(compression)
        .build();
    Ok(DataSourceExec::from_data_source(config))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::listing::PartitionedFile;
    use datafusion::datasource::physical_plan::CsvSource;
    use datafusion::execution::object_store::ObjectStoreUrl;

    use super::*;

    fn csv_scan(compression: FileCompressionType) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let source = Arc::new(CsvSource::new(schema));
        let config = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), source)
            .with_file(PartitionedFile::new("t.csv.gz", 100))
            .with_file_compression_type(compression)
            .build();
        DataSourceExec::from_data_source(config)
    }

    #[test]
    fn a_compressed_scan_comes_back_compressed() -> Result<()> {
        let wrapped = wrap(csv_scan(FileCompressionType::GZIP))?;
        let mut buf = Vec::new();
        encode(&wrapped, &mut buf).expect("the gzip scan is wrapped")?;
        // What a worker decodes as the child: the scan as DataFusion encodes it, uncompressed.
        let child = csv_scan(FileCompressionType::UNCOMPRESSED);
        let decoded = decode(&buf, &[child]).expect("recognised")?;
        assert_eq!(compressed(&decoded), Some(FileCompressionType::GZIP));
        Ok(())
    }

    #[test]
    fn other_scans_and_other_bytes_are_left_alone() -> Result<()> {
        let plain = wrap(csv_scan(FileCompressionType::UNCOMPRESSED))?;
        assert!(plain.downcast_ref::<DataSourceExec>().is_some());
        assert!(encode(&plain, &mut Vec::new()).is_none());
        assert!(decode(b"datafusion-python's own node", &[]).is_none());
        Ok(())
    }
}
