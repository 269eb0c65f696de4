//! `WindowFilters`: a window node given back the `FILTER`s of its aggregates, which the
//! encoding drops, and carrying them wherever the plan is encoded (see
//! `codec::window_filters`). Runs as its input.
use std::fmt;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};

use crate::plan_nodes::only;

/// A window node given back the filters of its aggregates: (expression name, filter as
/// logical expression bytes). Runs as its input.
#[derive(Debug)]
pub struct WindowFilters {
    input: Arc<dyn ExecutionPlan>,
    filters: Vec<(String, Vec<u8>)>,
}

impl WindowFilters {
    pub fn new(input: Arc<dyn ExecutionPlan>, filters: Vec<(String, Vec<u8>)>) -> Self {
        Self { input, filters }
    }

    /// (expression name, filter as logical expression bytes).
    pub fn filters(&self) -> &[(String, Vec<u8>)] {
        &self.filters
    }
}

impl DisplayAs for WindowFilters {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = self.filters.iter().map(|(n, _)| n.as_str()).collect();
        write!(f, "WindowFilters: {}", names.join(", "))
    }
}

impl ExecutionPlan for WindowFilters {
    fn name(&self) -> &str {
        "WindowFilters"
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    crate::plan_nodes::no_expressions!();

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(Self {
            input: only(&children, "WindowFilters")?,
            filters: self.filters.clone(),
        }))
    }

    crate::plan_nodes::runs_as!(input);
}
