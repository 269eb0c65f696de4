//! The planner's own defaults, for the Python config to be checked against.
use std::collections::HashMap;

use datafusion::common::config::{ConfigExtension, ExtensionOptions};
use datafusion_distributed::DistributedConfig;
use pyo3::prelude::*;

/// Every `distributed.*` setting of datafusion-distributed's `DistributedConfig` at its
/// default, as option strings (this build's: its features can change them).
#[pyfunction]
pub fn planner_defaults() -> HashMap<String, String> {
    let prefix = DistributedConfig::PREFIX;
    DistributedConfig::default()
        .entries()
        .into_iter()
        .map(|e| {
            let key = match e.key.starts_with(&format!("{prefix}.")) {
                true => e.key,
                false => format!("{prefix}.{}", e.key),
            };
            (key, e.value.unwrap_or_default())
        })
        .collect()
}
