//! Where the workers are: a fixed URL list, or a resolver (the user's Python callable) asked at
//! each query's planning.
use datafusion::common::{exec_datafusion_err, DataFusionError, Result};
use datafusion_distributed::WorkerResolver;
use url::Url;

use super::urls::parse_worker_url;

/// Lists the workers' URLs as written (asked at each query's planning), or says why not.
pub trait ListWorkers: Send + Sync {
    fn list(&self) -> std::result::Result<Vec<String>, String>;

    /// How many workers the cluster is starting now that `list` does not name yet (a
    /// replacement for one that died): a run again after a lost worker waits for them.
    fn starting(&self) -> usize {
        0
    }
}

pub enum Workers {
    Static(Vec<Url>),
    Resolver(Box<dyn ListWorkers>),
}

impl Workers {
    /// Resolves the current URL list, validating every entry.
    pub fn urls(&self) -> Result<Vec<Url>> {
        match self {
            Workers::Static(urls) => Ok(urls.clone()),
            Workers::Resolver(resolver) => {
                let raw = resolver
                    .list()
                    .map_err(|e| exec_datafusion_err!("worker resolver failed: {e}"))?;
                if raw.is_empty() {
                    return Err(exec_datafusion_err!(
                        "worker resolver returned no worker URLs"
                    ));
                }
                raw.iter()
                    .map(|u| parse_worker_url(u).map_err(DataFusionError::Configuration))
                    .collect()
            }
        }
    }

    /// Workers being started that the list does not name yet (never for a fixed list).
    pub fn starting(&self) -> usize {
        match self {
            Workers::Static(_) => 0,
            Workers::Resolver(resolver) => resolver.starting(),
        }
    }
}

/// Resolver handed to the distributed planner: a snapshot of the URLs taken at planning time,
/// so one query plans and runs against one consistent worker set.
pub struct FixedResolver(pub Vec<Url>);

impl WorkerResolver for FixedResolver {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.clone())
    }
}
