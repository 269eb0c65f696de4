//! The config a query plans and runs with: the session's `datafusion.*` settings and our
//! `distributed.*` knobs, applied onto a `SessionConfig` that has the distributed extension.
use std::collections::HashMap;

use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionConfig;
use datafusion_distributed::DistributedConfig;
use url::{Host, Url};

/// Our keys among a query's `distributed.*` options (the crate does not know them).
const OUR_KEYS: [&str; 4] = [
    super::adaptive_joins::ADAPTIVE,
    super::adaptive_joins::BROADCAST_BYTES,
    super::adaptive_joins::SKEW_BYTES,
    super::kept_whole::HOLD_WHOLE_BELOW,
];

/// Applies `options` to `cfg`: `datafusion.*` first so that `distributed.*` keys win any
/// overlap. A `datafusion.*` entry the config does not know (datafusion-python reports
/// runtime-env entries among its settings) stays with the session; an unknown or malformed
/// `distributed.*` entry is an error naming it.
pub fn apply_options(cfg: &mut SessionConfig, options: &HashMap<String, String>) -> Result<()> {
    let mut entries: Vec<_> = options.iter().collect();
    entries.sort_by_key(|(k, _)| (k.starts_with("distributed."), k.as_str()));
    for (key, value) in entries {
        if OUR_KEYS.contains(&key.as_str()) {
            continue; // read by the planner itself
        }
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

/// `distributed.compression = "auto"` made concrete for the workers `urls`: no compression
/// when every one is on this machine (the embedded cluster, loopback addresses), where
/// compressing shuffles costs CPU and saves no network; lz4 otherwise.
pub fn settle_compression(cfg: &mut SessionConfig, urls: &[Url], embedded: bool) {
    let Some(d) = cfg.options_mut().extensions.get_mut::<DistributedConfig>() else {
        return;
    };
    if d.compression == "auto" {
        let local = embedded || urls.iter().all(is_loopback);
        d.compression = if local { "none" } else { "lz4" }.to_string();
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn auto_compression_is_none_on_this_machine_only() {
        let settled = |urls: &[&str], embedded: bool| {
            let mut cfg = config();
            apply_options(&mut cfg, &options(&[("distributed.compression", "auto")])).unwrap();
            let urls: Vec<Url> = urls.iter().map(|u| Url::parse(u).unwrap()).collect();
            settle_compression(&mut cfg, &urls, embedded);
            let d = cfg.options().extensions.get::<DistributedConfig>().unwrap();
            d.compression.clone()
        };
        let local = [
            "http://127.0.0.1:50051",
            "http://localhost:50052",
            "http://[::1]:1",
        ];
        assert_eq!(settled(&local, false), "none");
        assert_eq!(settled(&["embedded://worker-0"], true), "none");
        let remote = ["http://127.0.0.1:50051", "http://198.18.0.2:50051"];
        assert_eq!(settled(&remote, false), "lz4");
        // A choice of the user's stays as it is.
        let mut cfg = config();
        apply_options(&mut cfg, &options(&[("distributed.compression", "zstd")])).unwrap();
        settle_compression(&mut cfg, &[], true);
        let d = cfg.options().extensions.get::<DistributedConfig>().unwrap();
        assert_eq!(d.compression, "zstd");
    }
}
