//! The client side, for `https://` upstream servers: verified against the system roots or a
//! per-upstream `ca_file`, with an optional SNI override; verification can be turned off per
//! upstream (`tls_insecure_skip_verify`), which is logged as a warning at start.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::provider;

/// TLS settings of one upstream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamTls {
    /// Trust only these roots (from `ca_file`); empty: the system roots.
    pub ca_certs: Vec<CertificateDer<'static>>,
    /// The name to send and verify instead of the server's host.
    pub sni: Option<ServerName<'static>>,
    pub insecure_skip_verify: bool,
}

pub fn client_config(tls: &UpstreamTls) -> Result<ClientConfig, rustls::Error> {
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    // ALPN (http/1.1) is set by the hyper-rustls connector, which requires it unset here.
    let config = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnything))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots(&tls.ca_certs))
            .with_no_client_auth()
    };
    Ok(config)
}

fn roots(ca_certs: &[CertificateDer<'static>]) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    if ca_certs.is_empty() {
        let native = rustls_native_certs::load_native_certs();
        for error in &native.errors {
            tracing::warn!(%error, "could not read some system root certificates");
        }
        roots.add_parsable_certificates(native.certs);
    } else {
        roots.add_parsable_certificates(ca_certs.iter().cloned());
    }
    roots
}

/// Accepts any server certificate: only for `tls_insecure_skip_verify = true`.
#[derive(Debug)]
struct AcceptAnything;

impl ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &provider().signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &provider().signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
