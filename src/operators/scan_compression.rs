//! `ScanCompression`: a compressed file scan with its compression beside it, for the encoding
//! that leaves it out (see `codec::scan_compression`). Runs as the scan.
use std::fmt;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

#[derive(Debug)]
pub struct ScanCompression {
    scan: Arc<dyn ExecutionPlan>,
    compression: FileCompressionType,
}

impl ScanCompression {
    pub fn new(scan: Arc<dyn ExecutionPlan>, compression: FileCompressionType) -> Self {
        Self { scan, compression }
    }

    pub fn compression(&self) -> FileCompressionType {
        self.compression
    }
}

impl DisplayAs for ScanCompression {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ScanCompression: {}", self.compression.get_variant())
    }
}

impl ExecutionPlan for ScanCompression {
    crate::plan_nodes::one_input_node!("ScanCompression", scan, |this, scan| Self {
        scan,
        compression: this.compression,
    });

    fn properties(&self) -> &Arc<PlanProperties> {
        self.scan.properties()
    }

    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.scan.execute(partition, ctx)
    }
}
