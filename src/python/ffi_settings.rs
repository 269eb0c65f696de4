//! A datafusion-python session's settings, read as the strings it sends.
//!
//! datafusion-ffi 55 sends a session's config as its options' `(key, value)` strings. The
//! crate's `SessionConfig::try_from` parses each into a `ConfigOptions`, and reading them back
//! as strings formats each again: at every query, more than half of the coordinator's
//! planning call (0.8 M of its 1.5 M instructions, counted by callgrind). Here the strings are
//! read as sent. The field is private in datafusion-ffi, so it is reached through a mirror of
//! the `#[repr(C)]` layout at `=55.2.0` (pinned in Cargo.toml): its size is checked at compile
//! time, and a test checks that it reads what the crate's own conversion gives.
use std::collections::HashMap;

use datafusion_ffi::config::extension_options::FFI_ExtensionOptions;
use datafusion_ffi::config::FFI_ConfigOptions;
use datafusion_ffi::session::config::FFI_SessionConfig;
use stabby::string::String as SString;
use stabby::vec::Vec as SVec;

/// `FFI_ConfigOptions` (datafusion-ffi 55.2.0, `config/mod.rs`), field for field.
#[repr(C)]
struct ConfigOptionsMirror {
    base_options: SVec<(SString, SString)>,
    extensions: FFI_ExtensionOptions,
}

const _: () = assert!(
    std::mem::size_of::<ConfigOptionsMirror>() == std::mem::size_of::<FFI_ConfigOptions>()
        && std::mem::align_of::<ConfigOptionsMirror>() == std::mem::align_of::<FFI_ConfigOptions>()
);

/// Every setting `config` carries, by key: DataFusion's own options with a value, then those
/// of config extensions (as `ConfigOptions::entries` lists them, without parsing any).
pub fn settings_of(config: &FFI_SessionConfig) -> HashMap<String, String> {
    // SAFETY: same layout (checked above, pinned version); only read, while `config` lives.
    let options = unsafe {
        &*(&config.config_options as *const FFI_ConfigOptions).cast::<ConfigOptionsMirror>()
    };
    let mut settings: HashMap<String, String> = options
        .base_options
        .iter()
        .map(|(key, value)| (key.as_str().to_owned(), value.as_str().to_owned()))
        .collect();
    // SAFETY: the extensions' own function, called on themselves.
    let extensions = unsafe { (options.extensions.entries)(&options.extensions) };
    for (key, value) in extensions.iter() {
        settings.insert(key.as_str().to_owned(), value.as_str().to_owned());
    }
    settings
}

#[cfg(test)]
mod tests {
    use datafusion::execution::config::SessionConfig;

    use super::*;

    /// What the crate's own conversion gives: the strings parsed into options, listed again.
    fn by_the_crate(config: &FFI_SessionConfig) -> HashMap<String, String> {
        let options = FFI_ConfigOptions::clone(&config.config_options);
        let options = datafusion::config::ConfigOptions::try_from(options).unwrap();
        options
            .entries()
            .into_iter()
            .filter_map(|e| e.value.map(|v| (e.key, v)))
            .collect()
    }

    #[test]
    fn reads_what_the_crates_conversion_gives() {
        let mut config = SessionConfig::new()
            .with_target_partitions(7)
            .with_batch_size(1234)
            .set_str("datafusion.sql_parser.dialect", "postgresql")
            .set_str("datafusion.execution.time_zone", "+05:00");
        config
            .options_mut()
            .extensions
            .insert(FFI_ExtensionOptions::from(HashMap::from([(
                "my_ext.knob".to_string(),
                "3".to_string(),
            )])));
        let ffi = FFI_SessionConfig::from(&config);
        let read = settings_of(&ffi);
        assert_eq!(read, by_the_crate(&ffi));
        assert_eq!(read["datafusion.execution.target_partitions"], "7");
        assert_eq!(read["datafusion.execution.batch_size"], "1234");
        assert_eq!(read["datafusion.execution.time_zone"], "+05:00");
        assert_eq!(read["my_ext.knob"], "3");
        assert!(
            read.len() > 100,
            "every option with a value: {}",
            read.len()
        );
    }
}
