//! Who may talk to a worker: a shared token checked on every RPC, and TLS (optionally mutual).
//!
//! The same [`Security`] configures both ends: a worker's server checks the token and serves
//! TLS with it; every channel a coordinator *or a worker* opens (workers pull shuffle inputs
//! from each other) sends the token and speaks TLS to `https://` URLs with it.
mod tls;
mod token;

pub use tls::TlsSettings;
pub use token::{Token, TokenCheck};

/// The largest gRPC message a worker accepts by default: plans carry in-memory tables, so this
/// is generous, but bounded (datafusion-distributed's own default is unbounded).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 30;

#[derive(Clone, Debug)]
pub struct Security {
    pub token: Option<Token>,
    pub tls: Option<TlsSettings>,
    /// Largest message a worker decodes.
    pub max_message_bytes: usize,
}

impl Default for Security {
    fn default() -> Self {
        Self {
            token: None,
            tls: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}
