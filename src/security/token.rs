//! The shared token: sent as `authorization: Bearer <token>` on every RPC, compared in
//! constant time by the worker before the request reaches the worker service (and so before
//! any plan, or pickled Python code inside one, is decoded).
use std::fmt;
use std::sync::Arc;

use http::header::AUTHORIZATION;
use http::HeaderValue;
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// A secret token; never shown by `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Arc<str>);

impl Token {
    pub fn new(secret: &str) -> Result<Self, String> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Err("the token is empty".into());
        }
        // The header value must be visible ASCII.
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token must be printable ASCII without spaces".into());
        }
        Ok(Self(secret.into()))
    }

    /// The `authorization` header value, marked sensitive (kept out of HTTP/2 header tables
    /// and debug output).
    pub fn header(&self) -> HeaderValue {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", self.0))
            .expect("checked to be visible ASCII");
        value.set_sensitive(true);
        value
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// The server-side check: a tonic interceptor.
#[derive(Clone)]
pub struct TokenCheck {
    expected: Option<Vec<u8>>,
}

impl TokenCheck {
    pub fn new(token: Option<&Token>) -> Self {
        Self {
            expected: token.map(|t| t.header().as_bytes().to_vec()),
        }
    }

    pub fn check(&self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .as_ref()
            .get(AUTHORIZATION)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        // `ct_eq` on slices of different lengths returns false without comparing contents.
        match bool::from(given.ct_eq(expected)) {
            true => Ok(request),
            false => {
                crate::meters::REQUESTS_REFUSED.add(1);
                Err(Status::unauthenticated(
                    "this worker requires a token: missing or wrong credentials",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    fn request(auth: Option<&str>) -> Request<()> {
        let mut request = Request::new(());
        if let Some(auth) = auth {
            request
                .metadata_mut()
                .insert("authorization", auth.parse().unwrap());
        }
        request
    }

    #[test]
    fn only_the_right_token_passes() {
        let check = TokenCheck::new(Some(&Token::new("s3cret").unwrap()));
        assert!(check.check(request(Some("Bearer s3cret"))).is_ok());
        for wrong in [
            None,
            Some("Bearer s3cre"),
            Some("Bearer s3cretX"),
            Some("s3cret"),
        ] {
            let status = check.check(request(wrong)).unwrap_err();
            assert_eq!(status.code(), Code::Unauthenticated);
            assert!(!status.message().contains("s3cret"));
        }
    }

    #[test]
    fn no_token_configured_lets_everyone_in() {
        assert!(TokenCheck::new(None).check(request(None)).is_ok());
    }

    #[test]
    fn tokens_are_never_shown() {
        let token = Token::new("s3cret").unwrap();
        assert!(!format!("{token:?}").contains("s3cret"));
        assert!(token.header().is_sensitive());
        assert!(Token::new("  ").is_err());
        assert!(Token::new("has space").is_err());
    }
}
