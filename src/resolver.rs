//! Where the workers are: a fixed URL list or a Python callable asked at each query's planning.
use datafusion::common::{exec_datafusion_err, DataFusionError, Result};
use datafusion_distributed::WorkerResolver;
use pyo3::prelude::*;
use url::Url;

pub enum Workers {
    Static(Vec<Url>),
    /// A Python callable returning a list of URL strings.
    Callable(Py<PyAny>),
}

impl Workers {
    /// Resolves the current URL list, validating every entry.
    pub fn urls(&self) -> Result<Vec<Url>> {
        match self {
            Workers::Static(urls) => Ok(urls.clone()),
            Workers::Callable(f) => Python::attach(|py| {
                let raw: Vec<String> = f
                    .call0(py)
                    .and_then(|v| v.extract(py))
                    .map_err(|e| exec_datafusion_err!("worker resolver failed: {e}"))?;
                if raw.is_empty() {
                    return Err(exec_datafusion_err!(
                        "worker resolver returned no worker URLs"
                    ));
                }
                raw.iter()
                    .map(|u| parse_worker_url(u).map_err(DataFusionError::Configuration))
                    .collect()
            }),
        }
    }
}

/// A worker address: `http(s)://host[:port]`, like `http://10.0.0.5:50051`.
pub fn parse_worker_url(raw: &str) -> std::result::Result<Url, String> {
    let bad = |why: String| format!("bad worker URL {raw:?}: {why} (expected http://host:port)");
    let no_scheme = || match raw.contains(char::is_whitespace) {
        true => bad("not a URL".into()),
        false => bad(format!("no scheme; did you mean \"http://{raw}\"?")),
    };
    let url = match Url::parse(raw) {
        Ok(url) if url.cannot_be_a_base() && !raw.contains("://") => return Err(no_scheme()),
        Ok(url) => url,
        Err(url::ParseError::RelativeUrlWithoutBase) => return Err(no_scheme()),
        Err(e) => return Err(bad(e.to_string())),
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!(
            "scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host".into()));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(bad("workers are addressed by host and port only".into()));
    }
    Ok(url)
}

/// `url` as users write it: `http://host:port`, without the `/` path `Url` adds.
pub fn display_url(url: &Url) -> &str {
    url.as_str().strip_suffix('/').unwrap_or(url.as_str())
}

/// Resolver handed to the distributed planner: a snapshot of the URLs taken at planning time,
/// so one query plans and runs against one consistent worker set.
pub struct FixedResolver(pub Vec<Url>);

impl WorkerResolver for FixedResolver {
    fn get_urls(&self) -> Result<Vec<Url>> {
        Ok(self.0.clone())
    }
}
