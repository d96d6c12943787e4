//! From `[store]` URLs to the settings of each node's connections: where to connect, the
//! session (ACL user, password, database) and TLS. The TLS roots are read once per store; a
//! cluster's nodes, found by asking the cluster, share the session of its seed URLs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use super::error::{ConnectionError, StoreError};
use super::pipe;
use super::redis_config::RedisConfig;

/// What every connection of a store shares.
#[derive(Clone)]
pub(crate) struct Session {
    username: Option<String>,
    /// Never logged or put in an error.
    password: Option<String>,
    db: i64,
    connect_timeout: Duration,
    timeout: Duration,
    /// For `rediss://`: the client config, verified against `ca_file` or the system roots,
    /// or not at all with `#insecure`.
    tls: Option<Arc<rustls::ClientConfig>>,
    merge: bool,
}

/// A host and port from a URL.
pub(super) type Address = (String, u16);

/// The session of `url` and where it points. On one node script calls are merged; a
/// cluster's are not (their keys may be in other slots) and it has only database 0.
pub(super) fn session(
    config: &RedisConfig,
    url: &str,
    cluster: bool,
) -> Result<(Session, Address), StoreError> {
    let info = url
        .into_connection_info()
        .map_err(|e| ConnectionError::BadUrl(Arc::new(e)))?;
    let (host, port, tls) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => (host.clone(), *port, None),
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } => (host.clone(), *port, Some(tls_client(config, *insecure)?)),
        // Unix sockets: the config takes only redis:// and rediss:// URLs.
        _ => {
            return Err(ConnectionError::NotTcp.into());
        }
    };
    let settings = info.redis_settings();
    let session = Session {
        username: settings.username().map(str::to_string),
        password: settings.password().map(str::to_string),
        db: if cluster { 0 } else { settings.db() },
        connect_timeout: config.connect_timeout,
        timeout: config.timeout,
        tls,
        merge: !cluster,
    };
    Ok((session, (host, port)))
}

impl Session {
    /// The settings of a connection to `host:port` in this session.
    pub(crate) fn node(&self, host: &str, port: u16) -> Result<pipe::Settings, StoreError> {
        let tls = match &self.tls {
            None => None,
            Some(config) => {
                let name = ServerName::try_from(host.to_string())
                    .map_err(|_| ConnectionError::TlsName { host: host.into() })?;
                Some(pipe::Tls {
                    config: config.clone(),
                    name,
                })
            }
        };
        Ok(pipe::Settings {
            host: host.to_string(),
            port,
            username: self.username.clone(),
            password: self.password.clone(),
            db: self.db,
            connect_timeout: self.connect_timeout,
            timeout: self.timeout,
            tls,
            merge: self.merge,
        })
    }
}

/// TLS for `rediss://` nodes: verified against `ca_file` or the system roots, as the redis
/// crate would; `#insecure` in the URL turns verification off, as it does there.
fn tls_client(
    config: &RedisConfig,
    insecure: bool,
) -> Result<Arc<rustls::ClientConfig>, StoreError> {
    let ca_certs = match &config.ca_file {
        Some(path) => read_roots(path)?,
        None => Vec::new(),
    };
    if insecure {
        tracing::warn!("rediss:// with #insecure: the Redis server's certificate is not verified");
    }
    let settings = crate::tls::upstream::UpstreamTls {
        ca_certs,
        sni: None,
        insecure_skip_verify: insecure,
    };
    let client =
        crate::tls::upstream::client_config(&settings).map_err(ConnectionError::TlsSettings)?;
    Ok(Arc::new(client))
}

/// Every certificate in the PEM file `path`, as `crate::tls::read_certs` reads them, with
/// the PEM error kept as the cause. A file without certificates is refused: empty roots
/// would mean the system's.
fn read_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConnectionError> {
    let unreadable = |e| ConnectionError::CaFile {
        path: path.into(),
        source: Arc::new(e),
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if certs.is_empty() {
        return Err(ConnectionError::NoCaCertificate { path: path.into() });
    }
    Ok(certs)
}
