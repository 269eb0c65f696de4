//! The Python `Security` object, as the Rust core's [`Security`].
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::security::{Security, TlsSettings, Token};

/// What `Security._to_core()` returns: plain values, PEM as bytes.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub struct SecuritySpec {
    token: Option<String>,
    tls: bool,
    ca_pem: Option<Vec<u8>>,
    cert_pem: Option<Vec<u8>>,
    key_pem: Option<Vec<u8>>,
    mutual: bool,
    server_name: Option<String>,
    max_message_bytes: Option<usize>,
}

impl TryFrom<Option<SecuritySpec>> for Security {
    type Error = PyErr;

    fn try_from(spec: Option<SecuritySpec>) -> PyResult<Self> {
        let Some(spec) = spec else {
            return Ok(Security::default());
        };
        let token = spec
            .token
            .as_deref()
            .map(Token::new)
            .transpose()
            .map_err(|why| PyValueError::new_err(format!("bad token: {why}")))?;
        let tls = spec.tls.then_some(TlsSettings {
            ca_pem: spec.ca_pem,
            cert_pem: spec.cert_pem,
            key_pem: spec.key_pem,
            mutual: spec.mutual,
            server_name: spec.server_name,
        });
        let mut security = Security {
            token,
            tls,
            ..Security::default()
        };
        if let Some(max) = spec.max_message_bytes {
            security.max_message_bytes = max;
        }
        Ok(security)
    }
}
