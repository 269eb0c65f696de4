//! TLS settings (PEM, from the Python `Security` object) as tonic's rustls configs.
#[cfg(feature = "tls")]
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

#[derive(Clone, Default)]
pub struct TlsSettings {
    /// The CA that signed the workers' certificates (and, with `mutual`, the clients').
    /// Without one, clients trust the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// This side's certificate and key: a worker serves with them; a client presents them
    /// (mutual TLS).
    pub cert_pem: Option<Vec<u8>>,
    pub key_pem: Option<Vec<u8>>,
    /// Workers require client certificates signed by `ca_pem`.
    pub mutual: bool,
    /// The name to verify workers' certificates against, for clusters addressed by IP.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("mutual", &self.mutual)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "tls")]
impl TlsSettings {
    fn identity(&self) -> Option<Identity> {
        match (&self.cert_pem, &self.key_pem) {
            (Some(cert), Some(key)) => Some(Identity::from_pem(cert, key)),
            _ => None,
        }
    }

    /// The server side: needs a certificate and key.
    pub fn server_config(&self) -> Result<ServerTlsConfig, String> {
        let identity = self
            .identity()
            .ok_or("a TLS worker needs a certificate and a key (tls_cert / tls_key)")?;
        let mut config = ServerTlsConfig::new().identity(identity);
        if self.mutual {
            let ca = self
                .ca_pem
                .as_ref()
                .ok_or("mutual TLS needs the CA that signs client certificates (tls_ca)")?;
            config = config.client_ca_root(Certificate::from_pem(ca));
        }
        Ok(config)
    }

    /// The client side, for `https://` workers.
    pub fn client_config(&self) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new();
        config = match &self.ca_pem {
            Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
            None => config.with_native_roots(),
        };
        if let Some(identity) = self.identity() {
            config = config.identity(identity);
        }
        if let Some(name) = &self.server_name {
            config = config.domain_name(name.clone());
        }
        config
    }
}
