//! Worker addresses as users write them: `http(s)://host:port`, validated with helpful hints.
use url::Url;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_host_and_port_urls_and_shows_them_as_written() {
        for raw in [
            "http://127.0.0.1:50051",
            "https://workers.example:8443",
            "http://h",
        ] {
            let url = parse_worker_url(raw).unwrap();
            assert_eq!(display_url(&url), raw);
        }
    }

    #[test]
    fn a_missing_scheme_gets_a_hint() {
        let err = parse_worker_url("localhost:50051").unwrap_err();
        assert!(
            err.contains("did you mean \"http://localhost:50051\"?"),
            "{err}"
        );
        let err = parse_worker_url("10.0.0.5:50051").unwrap_err();
        assert!(err.contains("http://10.0.0.5:50051"), "{err}");
    }

    #[test]
    fn rejects_what_is_not_a_worker_address() {
        for (raw, why) in [
            ("grpc://h:1", "scheme \"grpc\""),
            ("http://h:1/path", "host and port only"),
            ("http://h:1?q=1", "host and port only"),
            ("http://h:99999", "bad worker URL"),
            ("not a url", "not a URL"),
            ("http://", "bad worker URL"),
        ] {
            let err = parse_worker_url(raw).unwrap_err();
            assert!(err.contains(why), "{raw}: {err}");
            assert!(err.contains(&format!("{raw:?}")), "{raw}: {err}");
        }
    }
}
