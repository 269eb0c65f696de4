//! The object stores a worker reads through, per query.
//!
//! A query's coordinator names its stores (with credentials) in a request header. Each distinct
//! set gets its own object-store registry, on a runtime that shares the worker's memory pool and
//! disk manager: two coordinators with different credentials for the same bucket URL never
//! serve each other's queries. The worker's own stores (from its `setup`) are registered on top,
//! so what a worker was set up with wins.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::common::Result;
use datafusion::execution::object_store::DefaultObjectStoreRegistry;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use http::HeaderMap;

use crate::object_stores::{from_headers, register_all, StoreSpec, STORES_HEADER};

/// How many distinct store sets a worker keeps ready; past that they are rebuilt.
const KEPT: usize = 64;

pub struct WorkerStores {
    /// The worker's runtime, with only its own stores: for queries that name none.
    base: Arc<RuntimeEnv>,
    own: Vec<StoreSpec>,
    /// Runtimes by the exact header (the full settings) they were built from.
    by_settings: Mutex<HashMap<Vec<u8>, Arc<RuntimeEnv>>>,
}

impl WorkerStores {
    /// Registers the worker's own stores on `base` now.
    pub fn new(base: Arc<RuntimeEnv>, own: Vec<StoreSpec>) -> Result<Self> {
        register_all(&base, &own)?;
        Ok(Self {
            base,
            own,
            by_settings: Mutex::default(),
        })
    }

    /// The runtime a query with these request headers runs on.
    pub fn runtime_for(&self, headers: &HeaderMap) -> Result<Arc<RuntimeEnv>> {
        let Some(value) = headers.get(STORES_HEADER) else {
            return Ok(Arc::clone(&self.base));
        };
        let key = value.as_bytes();
        if let Some(runtime) = self.by_settings.lock().expect("poisoned").get(key) {
            return Ok(Arc::clone(runtime));
        }
        let runtime = RuntimeEnvBuilder::from_runtime_env(&self.base)
            .with_object_store_registry(Arc::new(DefaultObjectStoreRegistry::new()))
            .build_arc()?;
        register_all(&runtime, &from_headers(headers)?)?;
        register_all(&runtime, &self.own)?;
        let mut kept = self.by_settings.lock().expect("poisoned");
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(key.to_vec(), Arc::clone(&runtime));
        Ok(runtime)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::execution::object_store::ObjectStoreUrl;

    use super::*;
    use crate::object_stores::to_headers;

    fn s3(secret: &str) -> HeaderMap {
        let options: BTreeMap<String, String> = [
            ("aws_bucket", "b"),
            ("aws_region", "us-east-1"),
            ("aws_secret_access_key", secret),
            ("aws_access_key_id", "k"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        to_headers(&[StoreSpec::from(("s3://b".into(), "s3".into(), options))])
    }

    #[test]
    fn each_settings_set_gets_its_own_registry() {
        let stores = WorkerStores::new(Arc::new(RuntimeEnv::default()), vec![]).unwrap();
        let a = stores.runtime_for(&s3("secret-a")).unwrap();
        let b = stores.runtime_for(&s3("secret-b")).unwrap();
        let a_again = stores.runtime_for(&s3("secret-a")).unwrap();
        assert!(Arc::ptr_eq(&a, &a_again));
        assert!(!Arc::ptr_eq(
            &a.object_store_registry,
            &b.object_store_registry
        ));
        let url = ObjectStoreUrl::parse("s3://b").unwrap();
        let (sa, sb) = (a.object_store(&url).unwrap(), b.object_store(&url).unwrap());
        assert!(!Arc::ptr_eq(&sa, &sb));
        // The same pool: memory limits hold across queries.
        assert!(Arc::ptr_eq(&a.memory_pool, &b.memory_pool));
        // A query naming no store never sees another query's.
        let base = stores.runtime_for(&HeaderMap::new()).unwrap();
        assert!(base.object_store(&url).is_err());
    }
}
