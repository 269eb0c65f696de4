//! `MetadataRepair`: a fragment's root, marked so that whoever decodes it gives back what the
//! encoding dropped (see `codec::field_metadata`). Runs as the fragment.
use std::fmt;
use std::sync::Arc;

use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};

#[derive(Debug)]
pub struct MetadataRepair(Arc<dyn ExecutionPlan>);

impl MetadataRepair {
    /// `fragment` marked for repair on decoding.
    pub fn new(fragment: Arc<dyn ExecutionPlan>) -> Self {
        Self(fragment)
    }
}

impl DisplayAs for MetadataRepair {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "MetadataRepair")
    }
}

impl ExecutionPlan for MetadataRepair {
    crate::plan_nodes::one_input_node!("MetadataRepair", 0, |_this, input| MetadataRepair(input));

    crate::plan_nodes::runs_as!(0);
}
