//! The server side: certificates chosen by SNI (the first one is the default), behind an
//! atomic swap so they can be reloaded while connections keep their sessions.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use super::{CertFiles, LoadedCert, load_cert, name_matches, provider};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    V1_2,
    V1_3,
}

/// The certificates of one TLS listener.
#[derive(Debug)]
pub struct CertResolver {
    files: Vec<CertFiles>,
    certs: ArcSwap<Vec<LoadedCert>>,
}

impl CertResolver {
    pub fn new(files: Vec<CertFiles>, certs: Vec<LoadedCert>) -> CertResolver {
        CertResolver {
            files,
            certs: ArcSwap::from_pointee(certs),
        }
    }

    /// Reads every certificate file again and swaps them in for new connections; on any error
    /// nothing changes. Returns the warnings (certificates expiring soon).
    pub fn reload(&self) -> Result<Vec<String>, String> {
        let mut loaded = Vec::with_capacity(self.files.len());
        let mut warnings = Vec::new();
        for files in &self.files {
            let (cert, warning) = load_cert(files)?;
            loaded.push(cert);
            warnings.extend(warning);
        }
        self.certs.store(Arc::new(loaded));
        Ok(warnings)
    }

    fn choose(&self, server_name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let certs = self.certs.load();
        let by_name = server_name.map(str::to_ascii_lowercase).and_then(|name| {
            certs
                .iter()
                .find(|c| c.names.iter().any(|pattern| name_matches(pattern, &name)))
        });
        by_name.or(certs.first()).map(|c| c.key.clone())
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(client_hello.server_name())
    }
}

/// A TLS acceptor offering h2 and http/1.1 by ALPN, with certificates from `resolver`.
pub(crate) fn acceptor(
    resolver: Arc<CertResolver>,
    min_version: TlsVersion,
) -> Result<TlsAcceptor, rustls::Error> {
    let versions: &[&rustls::SupportedProtocolVersion] = match min_version {
        TlsVersion::V1_2 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::V1_3 => &[&rustls::version::TLS13],
    };
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
