//! Store specs on the wire: a request header holding base64 of their JSON, so any option text
//! is a valid header value; marked sensitive so it never appears in logs.
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use datafusion::common::Result;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::spec::{config_err, StoreSpec};

/// The header carrying store specs to worker processes.
pub const STORES_HEADER: &str = "x-dfdpy-object-stores";

pub fn to_headers(specs: &[StoreSpec]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if specs.is_empty() {
        return headers;
    }
    let json = serde_json::to_vec(specs).expect("store specs are plain strings");
    let mut value =
        HeaderValue::from_str(&URL_SAFE_NO_PAD.encode(json)).expect("base64 is a header value");
    value.set_sensitive(true);
    headers.insert(HeaderName::from_static(STORES_HEADER), value);
    headers
}

pub fn from_headers(headers: &HeaderMap) -> Result<Vec<StoreSpec>> {
    let Some(value) = headers.get(STORES_HEADER) else {
        return Ok(vec![]);
    };
    let malformed = |why: String| config_err(format!("malformed object store header: {why}"));
    let json = URL_SAFE_NO_PAD
        .decode(value.as_bytes())
        .map_err(|e| malformed(e.to_string()))?;
    serde_json::from_slice(&json).map_err(|e| malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn specs_round_trip_through_the_header() {
        let options: BTreeMap<String, String> = [
            ("aws_secret_access_key", "s3cr\u{e9}t/+= \n\"quoted\""),
            ("aws_endpoint", "http://127.0.0.1:5000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let specs = vec![
            StoreSpec::from(("s3://bucket".into(), "s3".into(), options)),
            StoreSpec::from(("file://".into(), "local".into(), BTreeMap::new())),
        ];
        let headers = to_headers(&specs);
        let value = headers.get(STORES_HEADER).unwrap();
        assert!(value.is_sensitive());
        assert!(!value.to_str().unwrap().contains("s3cr"));
        assert_eq!(from_headers(&headers).unwrap(), specs);
    }

    #[test]
    fn no_stores_no_header() {
        assert!(to_headers(&[]).is_empty());
        assert_eq!(from_headers(&HeaderMap::new()).unwrap(), vec![]);
    }

    #[test]
    fn a_malformed_header_is_an_error() {
        let mut headers = HeaderMap::new();
        headers.insert(STORES_HEADER, HeaderValue::from_static("not base64!"));
        let err = from_headers(&headers).unwrap_err();
        assert!(err.to_string().contains("malformed object store header"));
    }
}
