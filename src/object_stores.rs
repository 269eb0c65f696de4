//! Object stores registered on the user's `SessionContext`, rebuilt where plans run.
//!
//! datafusion-python keeps its object stores in its own RuntimeEnv, which does not cross the
//! FFI boundary; the Python layer records how each store was configured and hands us
//! `StoreSpec`s. The coordinator registers them on its runtime (shared with embedded
//! workers) and sends them to worker processes in a request header, never in plans or logs.
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use futures::stream::BoxStream;
use futures::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use serde_json::{json, Value};
use url::Url;

/// The header carrying store specs to worker processes (hex of JSON).
pub const STORES_HEADER: &str = "x-dfdpy-object-stores";

/// One registered store: its URL prefix (`s3://bucket`), kind and options.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    fn build(&self) -> Result<(Url, Arc<dyn ObjectStore>)> {
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

fn config_err(msg: String) -> DataFusionError {
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

/// Specs as a header value: hex-encoded JSON, so any option text is a valid header.
pub fn to_headers(specs: &[StoreSpec]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if specs.is_empty() {
        return headers;
    }
    let list: Vec<Value> = specs
        .iter()
        .map(|s| json!({"url": s.url, "kind": s.kind, "options": s.options}))
        .collect();
    let text = Value::Array(list).to_string();
    let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    let mut value = HeaderValue::from_str(&hex).expect("hex is a valid header value");
    value.set_sensitive(true);
    headers.insert(HeaderName::from_static(STORES_HEADER), value);
    headers
}

pub fn from_headers(headers: &HeaderMap) -> Result<Vec<StoreSpec>> {
    let Some(value) = headers.get(STORES_HEADER) else {
        return Ok(vec![]);
    };
    let hex = value.as_bytes();
    let bytes = (0..hex.len() / 2)
        .map(|i| {
            u8::from_str_radix(
                std::str::from_utf8(&hex[2 * i..2 * i + 2]).unwrap_or("zz"),
                16,
            )
        })
        .collect::<std::result::Result<Vec<u8>, _>>()
        .map_err(|_| config_err("malformed object store header".into()))?;
    let list: Vec<Value> = serde_json::from_slice(&bytes)
        .map_err(|e| config_err(format!("malformed object store header: {e}")))?;
    list.into_iter()
        .map(|v| {
            let text = |k: &str| {
                v.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let options = v
                .get("options")
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            Ok(StoreSpec {
                url: text("url"),
                kind: text("kind"),
                options,
            })
        })
        .collect()
}

/// Registers the stores a request names on a worker's runtime, once per distinct set, then the
/// worker's own stores (from its `setup`) again on top: what a worker was set up with wins.
pub struct WorkerStores {
    seen: Mutex<HashSet<Vec<u8>>>,
    own: Vec<StoreSpec>,
}

impl WorkerStores {
    /// With the worker's own stores, registered on `runtime` now.
    pub fn with_own(runtime: &RuntimeEnv, own: Vec<StoreSpec>) -> Result<Self> {
        register_all(runtime, &own)?;
        Ok(Self {
            seen: Mutex::default(),
            own,
        })
    }

    pub fn apply(&self, runtime: &RuntimeEnv, headers: &HeaderMap) -> Result<()> {
        let Some(value) = headers.get(STORES_HEADER) else {
            return Ok(());
        };
        if self
            .seen
            .lock()
            .expect("poisoned")
            .contains(value.as_bytes())
        {
            return Ok(());
        }
        register_all(runtime, &from_headers(headers)?)?;
        register_all(runtime, &self.own)?;
        self.seen
            .lock()
            .expect("poisoned")
            .insert(value.as_bytes().to_vec());
        Ok(())
    }
}

/// Stands in for a store that could not be rebuilt: any use fails with the reason, so a query
/// that does not touch it runs and one that does gets a clear error instead of "no store".
#[derive(Debug)]
struct Unavailable(String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Unavailable({})", self.0)
    }
}

impl Unavailable {
    fn err(&self) -> object_store::Error {
        object_store::Error::Generic {
            store: "datafusion-distributed-py",
            source: self.0.clone().into(),
        }
    }
}

#[async_trait::async_trait]
impl ObjectStore for Unavailable {
    async fn put_opts(
        &self,
        _location: &Path,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.err())
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.err())
    }

    async fn get_opts(
        &self,
        _location: &Path,
        _options: GetOptions,
    ) -> object_store::Result<GetResult> {
        Err(self.err())
    }

    fn delete_stream(
        &self,
        _locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        futures::stream::once(futures::future::ready(Err(self.err()))).boxed()
    }

    fn list(&self, _prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        futures::stream::once(futures::future::ready(Err(self.err()))).boxed()
    }

    async fn list_with_delimiter(
        &self,
        _prefix: Option<&Path>,
    ) -> object_store::Result<ListResult> {
        Err(self.err())
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(self.err())
    }
}
