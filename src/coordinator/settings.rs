//! The config a query plans and runs with: the session's `datafusion.*` settings and our
//! `distributed.*` knobs, applied onto a `SessionConfig` that has the distributed extension.
use std::collections::HashMap;

use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionConfig;

/// Applies `options` to `cfg`: `datafusion.*` first so that `distributed.*` keys win any
/// overlap. A `datafusion.*` entry the config does not know (datafusion-python reports
/// runtime-env entries among its settings) stays with the session; an unknown or malformed
/// `distributed.*` entry is an error naming it.
pub fn apply_options(cfg: &mut SessionConfig, options: &HashMap<String, String>) -> Result<()> {
    let mut entries: Vec<_> = options.iter().collect();
    entries.sort_by_key(|(k, _)| (k.starts_with("distributed."), k.as_str()));
    for (key, value) in entries {
        match cfg.options_mut().set(key, value) {
            Ok(()) => {}
            Err(e) if key.starts_with("datafusion.") => {
                log::info!("not forwarding session setting {key}: {e}")
            }
            Err(e) => {
                return Err(DataFusionError::Configuration(format!(
                    "config {key}={value}: {e}"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use datafusion_distributed::DistributedConfig;

    use super::*;

    fn config() -> SessionConfig {
        // The planner's setters register the `distributed` extension the same way.
        let mut cfg = SessionConfig::new();
        cfg.options_mut()
            .extensions
            .insert(DistributedConfig::default());
        cfg
    }

    fn options(entries: &[(&str, &str)]) -> HashMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn applies_session_and_distributed_settings() {
        let mut cfg = config();
        let opts = options(&[
            ("datafusion.execution.batch_size", "1234"),
            ("distributed.broadcast_joins", "false"),
            ("distributed.file_scan_config_bytes_per_partition", "4096"),
        ]);
        apply_options(&mut cfg, &opts).unwrap();
        assert_eq!(cfg.batch_size(), 1234);
        let d = cfg.options().extensions.get::<DistributedConfig>().unwrap();
        assert!(!d.broadcast_joins);
        assert_eq!(d.file_scan_config_bytes_per_partition, 4096);
    }

    #[test]
    fn unknown_session_settings_stay_behind() {
        let mut cfg = config();
        let opts = options(&[("datafusion.runtime.memory_limit", "1G")]);
        apply_options(&mut cfg, &opts).unwrap();
    }

    #[test]
    fn a_bad_distributed_setting_is_named() {
        for (key, value) in [
            ("distributed.no_such_knob", "1"),
            ("distributed.broadcast_joins", "maybe"),
        ] {
            let err = apply_options(&mut config(), &options(&[(key, value)])).unwrap_err();
            assert!(err.to_string().contains(key), "{err}");
        }
    }
}
