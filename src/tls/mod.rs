//! TLS with rustls (ring provider): certificates loaded and checked at config load, a server
//! certificate resolver that picks by SNI and can be reloaded in place, and client configs for
//! HTTPS upstreams.

pub(crate) mod server;
pub(crate) mod upstream;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// A certificate closer than this to its expiry is reported at load.
pub(crate) const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 86_400);

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where a certificate chain and its key live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A certificate ready to serve, with the names it is valid for.
#[derive(Debug, Clone)]
pub struct LoadedCert {
    pub key: Arc<CertifiedKey>,
    /// Lower-case DNS names from the subject alternative names (`*.example.com` allowed).
    pub names: Vec<String>,
    /// Seconds since the Unix epoch.
    pub not_after: i64,
}

/// Loads and checks one certificate and key. `Ok` carries a warning when it expires soon.
pub(crate) fn load_cert(files: &CertFiles) -> Result<(LoadedCert, Option<String>), String> {
    let chain = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        format!(
            "{}: no usable private key: {}",
            files.key.display(),
            pem_error(e)
        )
    })?;
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{}: unsupported private key: {e}", files.key.display()))?;
    let certified = CertifiedKey::new(chain.clone(), signing_key);
    certified.keys_match().map_err(|_| {
        format!(
            "{} does not match the certificate in {}",
            files.key.display(),
            files.cert.display()
        )
    })?;
    let (names, not_after) =
        names_and_expiry(&chain[0]).map_err(|e| format!("{}: {e}", files.cert.display()))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    if not_after < now {
        return Err(format!(
            "{} expired at {} (Unix time)",
            files.cert.display(),
            not_after
        ));
    }
    let warning = (not_after - now < EXPIRY_WARNING.as_secs() as i64).then(|| {
        format!(
            "{} expires in {} days",
            files.cert.display(),
            (not_after - now) / 86_400
        )
    });
    Ok((
        LoadedCert {
            key: Arc::new(certified),
            names,
            not_after,
        },
        warning,
    ))
}

/// Every certificate in a PEM file; an error when there is none.
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {}", path.display(), pem_error(e)))?
        .collect();
    let certs = certs.map_err(|e| format!("{}: {}", path.display(), pem_error(e)))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no PEM certificate in the file",
            path.display()
        ));
    }
    Ok(certs)
}

fn pem_error(error: rustls::pki_types::pem::Error) -> String {
    match error {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item found".into(),
        other => format!("{other:?}"),
    }
}

fn names_and_expiry(cert: &CertificateDer<'_>) -> Result<(Vec<String>, i64), String> {
    use x509_parser::prelude::*;
    let (_, parsed) = X509Certificate::from_der(cert.as_ref())
        .map_err(|e| format!("not a valid X.509 certificate: {e}"))?;
    let mut names: Vec<String> = match parsed.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(name) => Some(name.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        // Old certificates name their host only in the subject's common name.
        names.extend(
            parsed
                .subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_ascii_lowercase),
        );
    }
    Ok((names, parsed.validity().not_after.timestamp()))
}

/// True when `name` (lower case) is covered by certificate name `pattern`.
pub(crate) fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_prefix("*.") {
        // A wildcard covers exactly one label.
        Some(suffix) => name
            .split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix),
        None => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_cover_one_label() {
        assert!(name_matches("api.example.com", "api.example.com"));
        assert!(name_matches("*.example.com", "api.example.com"));
        assert!(!name_matches("*.example.com", "example.com"));
        assert!(!name_matches("*.example.com", "a.b.example.com"));
        assert!(!name_matches("api.example.com", "www.example.com"));
    }
}
