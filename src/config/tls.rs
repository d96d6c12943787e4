//! Validation of `[[server.tls]]` and the TLS keys of upstreams. Certificates are loaded and
//! checked here, so `check` catches missing files, mismatched keys and expired certificates.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::problems::{Problems, echo};
use super::raw::{RawTlsListener, RawUpstream};
use crate::tls::server::{CertResolver, TlsVersion};
use crate::tls::upstream::UpstreamTls;
use crate::tls::{CertFiles, load_cert, read_certs};

/// One HTTPS listener.
#[derive(Debug, Clone)]
pub struct TlsListenerConfig {
    pub listen: SocketAddr,
    pub min_version: TlsVersion,
    pub handshake_timeout: Duration,
    /// Its certificates, loaded; `reload` re-reads the files in place.
    pub certs: Arc<CertResolver>,
}

pub(super) fn listeners(
    raw: &[RawTlsListener],
    base_dir: &Path,
    problems: &mut Problems,
) -> Vec<TlsListenerConfig> {
    raw.iter()
        .enumerate()
        .filter_map(|(i, l)| listener(l, &format!("server.tls[{i}]"), base_dir, problems))
        .collect()
}

fn listener(
    raw: &RawTlsListener,
    path: &str,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<TlsListenerConfig> {
    let listen = raw
        .listen
        .parse::<SocketAddr>()
        .map_err(|_| {
            problems.push(
                format!("{path}.listen"),
                format!(
                    "expected IP:port such as \"0.0.0.0:8443\", got {}",
                    echo(&raw.listen)
                ),
            )
        })
        .ok();
    if raw.certs.is_empty() {
        problems.push(
            format!("{path}.certs"),
            "expected at least one { cert = \"...\", key = \"...\" }",
        );
    }
    let mut files = Vec::new();
    let mut loaded = Vec::new();
    for (i, certs) in raw.certs.iter().enumerate() {
        let pair = CertFiles {
            cert: base_dir.join(&certs.cert),
            key: base_dir.join(&certs.key),
        };
        problems.watch(&pair.cert);
        problems.watch(&pair.key);
        match load_cert(&pair) {
            Ok((cert, warning)) => {
                loaded.push(cert);
                problems.warn(format!("{path}.certs[{i}]"), warning);
            }
            Err(message) => problems.push(format!("{path}.certs[{i}]"), message),
        }
        files.push(pair);
    }
    let min_version = match raw.min_version.as_deref() {
        None | Some("1.2") => TlsVersion::V1_2,
        Some("1.3") => TlsVersion::V1_3,
        Some(other) => {
            problems.push(
                format!("{path}.min_version"),
                format!("expected \"1.2\" or \"1.3\", got {}", echo(other)),
            );
            TlsVersion::V1_2
        }
    };
    let handshake_timeout = problems.duration(
        format!("{path}.handshake_timeout"),
        raw.handshake_timeout.as_deref(),
        Duration::from_secs(10),
    );
    Some(TlsListenerConfig {
        listen: listen?,
        min_version,
        handshake_timeout,
        certs: Arc::new(CertResolver::new(files, loaded)),
    })
}

pub(super) fn upstream_tls(
    raw: &RawUpstream,
    path: &str,
    base_dir: &Path,
    problems: &mut Problems,
) -> UpstreamTls {
    let ca_certs = match &raw.ca_file {
        None => Vec::new(),
        Some(file) => read_certs(&base_dir.join(file)).unwrap_or_else(|message| {
            problems.push(format!("{path}.ca_file"), message);
            Vec::new()
        }),
    };
    let sni = raw.sni.as_ref().and_then(|name| {
        rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|_| {
                problems.push(
                    format!("{path}.sni"),
                    format!("expected a host name, got {}", echo(name)),
                )
            })
            .ok()
    });
    let insecure_skip_verify = raw.tls_insecure_skip_verify.unwrap_or(false);
    if insecure_skip_verify && raw.ca_file.is_some() {
        problems.push(
            format!("{path}.tls_insecure_skip_verify"),
            "conflicts with ca_file: nothing would be verified against it",
        );
    }
    UpstreamTls {
        ca_certs,
        sni,
        insecure_skip_verify,
    }
}
