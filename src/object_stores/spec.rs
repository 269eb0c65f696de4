//! `StoreSpec`: one store as Python described it, and how it is rebuilt.
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;
use serde::{Deserialize, Serialize};
use url::Url;

use super::unavailable::Unavailable;

/// One registered store: its URL prefix (`s3://bucket`), kind and options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreSpec {
    pub url: String,
    pub kind: String,
    pub options: BTreeMap<String, String>,
}

/// As Python describes a store: `(url, kind, options)`.
impl From<(String, String, BTreeMap<String, String>)> for StoreSpec {
    fn from((url, kind, options): (String, String, BTreeMap<String, String>)) -> Self {
        Self { url, kind, options }
    }
}

impl StoreSpec {
    pub fn build(&self) -> Result<(Url, Arc<dyn ObjectStore>)> {
        let url = Url::parse(&self.url)
            .map_err(|e| config_err(format!("object store URL {:?}: {e}", self.url)))?;
        let store: Arc<dyn ObjectStore> = match self.kind.as_str() {
            "s3" => {
                let mut builder = AmazonS3Builder::new();
                for (key, value) in &self.options {
                    let key: AmazonS3ConfigKey = key
                        .parse()
                        .map_err(|e| config_err(format!("S3 option {key:?}: {e}")))?;
                    builder = builder.with_config(key, value);
                }
                Arc::new(builder.build().map_err(store_err)?)
            }
            "http" => {
                let base = self.options.get("url").cloned().unwrap_or(self.url.clone());
                Arc::new(
                    HttpBuilder::new()
                        .with_url(base)
                        .build()
                        .map_err(store_err)?,
                )
            }
            "local" => match self.options.get("prefix") {
                Some(prefix) => {
                    Arc::new(LocalFileSystem::new_with_prefix(prefix).map_err(store_err)?)
                }
                None => Arc::new(LocalFileSystem::new()),
            },
            "unknown" => Arc::new(Unavailable(format!(
                "the object store for {} was created before datafusion_distributed_py was \
                 imported, so its settings could not be recorded for the workers: import \
                 datafusion_distributed_py first, then create and register the store",
                self.url
            ))),
            other => Arc::new(Unavailable(format!(
                "object stores of kind {other:?} ({}) are not forwarded to workers yet \
                 (supported: AmazonS3/S3-compatible, Http, LocalFileSystem)",
                self.url
            ))),
        };
        Ok((url, store))
    }
}

pub fn config_err(msg: String) -> DataFusionError {
    DataFusionError::Configuration(msg)
}

fn store_err(e: object_store::Error) -> DataFusionError {
    DataFusionError::ObjectStore(Box::new(e))
}

pub fn register_all(runtime: &RuntimeEnv, specs: &[StoreSpec]) -> Result<()> {
    for spec in specs {
        let (url, store) = spec.build()?;
        runtime.register_object_store(&url, store);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(url: &str, kind: &str, options: &[(&str, &str)]) -> StoreSpec {
        let options = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StoreSpec::from((url.to_string(), kind.to_string(), options))
    }

    #[test]
    fn builds_each_supported_kind() {
        let s3 = spec(
            "s3://bucket",
            "s3",
            &[("aws_bucket", "bucket"), ("aws_region", "us-east-1")],
        );
        assert_eq!(s3.build().unwrap().0.as_str(), "s3://bucket");
        spec("http://example.com", "http", &[]).build().unwrap();
        spec("file://", "local", &[]).build().unwrap();
    }

    #[test]
    fn a_bad_option_is_named() {
        let err = spec("s3://b", "s3", &[("not_an_option", "x")])
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("not_an_option"), "{err}");
    }

    #[tokio::test]
    async fn an_unforwardable_kind_fails_when_used_naming_why() {
        let (_, store) = spec("gs://b", "gcs", &[]).build().unwrap();
        let err = store
            .get_opts(&"x".into(), Default::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("\"gcs\""), "{err}");
    }
}
