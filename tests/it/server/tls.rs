//! HTTPS end to end, with certificates made in the test by rcgen: termination with SNI and
//! ALPN, HTTPS upstreams, garbage on the TLS port, certificate reload, and `check` failures.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use support::recording::read_head;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate: PEM for files, DER to compare with what a server presented.
struct Leaf {
    cert_pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn leaf(&self, names: &[&str], not_after: Option<time::OffsetDateTime>) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        if let Some(not_after) = not_after {
            params.not_after = not_after;
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        roots
    }
}

fn tls_client(roots: rustls::RootCertStore, alpn: &[&[u8]]) -> TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// Connects over TLS as `name`; returns the stream.
async fn connect(
    connector: &TlsConnector,
    addr: SocketAddr,
    name: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    connector
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

/// One GET over an established TLS stream with the negotiated protocol; returns status and body.
async fn get_over(
    stream: tokio_rustls::client::TlsStream<TcpStream>,
    authority: &str,
) -> (StatusCode, Bytes) {
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let request = Request::get(format!("https://{authority}/tls"))
        .header("host", authority)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = if h2 {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        sender.send_request(request).await.unwrap()
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        sender.send_request(request).await.unwrap()
    };
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

/// Writes the certificate files and starts a gateway with one TLS listener serving `certs`.
async fn tls_gateway(
    name: &str,
    files: &[(&str, &str)],
    certs: &str,
    upstream: &TestUpstream,
) -> (TestGateway, std::path::PathBuf) {
    let text = format!(
        "[[server.tls]]\nlisten = \"127.0.0.1:0\"\ncerts = [{certs}]\n\n{}",
        one_route_config(&[upstream.url()], "")
    );
    TestGateway::start_in_dir(name, files, &text).await
}

/// A gateway whose one TLS listener serves `leaf` (as api.pem / api.key).
async fn single_cert_gateway(
    name: &str,
    leaf: &Leaf,
    upstream: &TestUpstream,
) -> (TestGateway, std::path::PathBuf) {
    let files = [
        ("api.pem", leaf.cert_pem.as_str()),
        ("api.key", leaf.key_pem.as_str()),
    ];
    tls_gateway(
        name,
        &files,
        r#"{ cert = "api.pem", key = "api.key" }"#,
        upstream,
    )
    .await
}

/// An upstream that answers with the X-Forwarded-Proto it saw.
async fn proto_upstream() -> TestUpstream {
    TestUpstream::start(|request| async move {
        let proto = request
            .headers()
            .get("x-forwarded-proto")
            .map(|v| v.to_str().unwrap().to_string());
        Response::new(full(proto.unwrap_or_default()))
    })
    .await
}

#[tokio::test]
async fn https_verifies_against_the_ca_and_alpn_negotiates_h2_and_http1() {
    let ca = TestCa::new("test CA");
    let api = ca.leaf(&["api.test"], None);
    let upstream = proto_upstream().await;
    let (gateway, _) = single_cert_gateway("tls-alpn", &api, &upstream).await;
    let tls_addr = gateway.tls_addr.unwrap();

    for (alpn, expected) in [
        (&[&b"h2"[..], b"http/1.1"][..], Some(&b"h2"[..])),
        (&[&b"http/1.1"[..]][..], Some(&b"http/1.1"[..])),
        (&[][..], None),
    ] {
        let stream = connect(&tls_client(ca.roots(), alpn), tls_addr, "api.test").await;
        assert_eq!(stream.get_ref().1.alpn_protocol(), expected);
        let (status, body) = get_over(stream, "api.test").await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"https"[..]));
    }
    // The plain listener still says http.
    assert_eq!(&get(&gateway.url("/")).await.1[..], b"http");

    // A client that chose HTTP/1.1 by ALPN does not get HTTP/2 by sending its preface
    // (RFC 9113 §3.3): the gateway speaks HTTP/1.1 on that connection and closes it.
    let stream = connect(
        &tls_client(ca.roots(), &[b"http/1.1"]),
        tls_addr,
        "api.test",
    )
    .await;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = Request::get("https://api.test/tls")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let within = std::time::Duration::from_secs(10);
    let sent = tokio::time::timeout(within, sender.send_request(request));
    assert!(sent.await.expect("an end within 10 s").is_err());
    assert_eq!(upstream.hits(), 4);
}

#[tokio::test]
async fn sni_picks_the_certificate_and_unknown_names_get_the_default() {
    let ca = TestCa::new("test CA");
    let api = ca.leaf(&["api.test"], None);
    let other = ca.leaf(&["*.other.test"], None);
    let upstream = TestUpstream::ok("ok").await;
    let files = [
        ("api.pem", api.cert_pem.as_str()),
        ("api.key", api.key_pem.as_str()),
        ("other.pem", other.cert_pem.as_str()),
        ("other.key", other.key_pem.as_str()),
    ];
    let certs =
        r#"{ cert = "api.pem", key = "api.key" }, { cert = "other.pem", key = "other.key" }"#;
    let (gateway, _) = tls_gateway("tls-sni", &files, certs, &upstream).await;
    let tls_addr = gateway.tls_addr.unwrap();
    let client = tls_client(ca.roots(), &[b"http/1.1"]);

    let presented = |stream: &tokio_rustls::client::TlsStream<TcpStream>| {
        stream.get_ref().1.peer_certificates().unwrap()[0].clone()
    };
    assert_eq!(
        presented(&connect(&client, tls_addr, "api.test").await),
        api.der
    );
    assert_eq!(
        presented(&connect(&client, tls_addr, "www.other.test").await),
        other.der
    );
    // An unknown name gets the first certificate, which the client then rightly refuses.
    let tcp = TcpStream::connect(tls_addr).await.unwrap();
    let refused = client
        .connect(ServerName::try_from("unknown.test").unwrap(), tcp)
        .await;
    let error = refused
        .expect_err("the default certificate does not cover unknown.test")
        .to_string();
    assert!(
        error.contains("NotValidForName") || error.contains("not valid for name"),
        "{error}"
    );
}

/// A TLS acceptor with a certificate for upstream.test signed by `ca`.
fn upstream_acceptor(ca: &TestCa) -> TlsAcceptor {
    let leaf = ca.leaf(&["upstream.test"], None);
    let key = rustls::pki_types::PrivateKeyDer::try_from(
        KeyPair::from_pem(&leaf.key_pem).unwrap().serialize_der(),
    )
    .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der.clone()], key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}

/// A hand-written HTTPS upstream that answers each request "ok" (after reading its
/// Content-Length body) and, with `close_when_idle`, ends each connection (close_notify, then
/// FIN) a moment after one answer without saying so. Returns its address, its accept count and
/// the count of connections it closed that way.
async fn raw_https_upstream(
    ca: &TestCa,
    close_when_idle: bool,
) -> (
    SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let acceptor = upstream_acceptor(ca);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (counting, closing) = (accepted.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (acceptor, closing) = (acceptor.clone(), closing.clone());
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buffer = Vec::new();
                loop {
                    let Some(head_end) = read_head(&mut stream, &mut buffer).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buffer.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buffer.drain(..head_end + length);
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                    if close_when_idle {
                        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                        let _ = stream.shutdown().await;
                        closing.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted, closed)
}

/// An HTTPS upstream whose certificate (for upstream.test) is signed by `ca`.
async fn https_upstream(ca: &TestCa) -> SocketAddr {
    let acceptor = upstream_acceptor(ca);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(|_| async {
                    Ok::<_, std::convert::Infallible>(Response::new(full("secure upstream")))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn via_https_upstream(
    ca_pem: &str,
    upstream: SocketAddr,
    name: &str,
) -> (Response<()>, Bytes) {
    let text = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"https://{upstream}\"]\nca_file = \"ca.pem\"\nsni = \"upstream.test\"\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n"
    );
    let (gateway, _) = TestGateway::start_in_dir(name, &[("ca.pem", ca_pem)], &text).await;
    get(&gateway.url("/")).await
}

#[tokio::test]
async fn an_https_upstream_is_verified_against_its_ca_file() {
    let ca = TestCa::new("upstream CA");
    let upstream = https_upstream(&ca).await;
    let (response, body) = via_https_upstream(&ca.pem(), upstream, "tls-upstream-good").await;
    assert_answer(&response, &body, StatusCode::OK, "secure upstream", "");

    let stranger = TestCa::new("some other CA");
    let (response, body) = via_https_upstream(&stranger.pem(), upstream, "tls-upstream-bad").await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let answer = problem(&response, &body);
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("secure connection"),
        "{answer}"
    );
}

#[tokio::test]
async fn garbage_and_plain_http_on_the_tls_port_do_not_disturb_a_good_client() {
    let ca = TestCa::new("test CA");
    let api = ca.leaf(&["api.test"], None);
    let upstream = TestUpstream::ok("ok").await;
    let (gateway, _) = single_cert_gateway("tls-garbage", &api, &upstream).await;
    let tls_addr = gateway.tls_addr.unwrap();

    let mut plain = TcpStream::connect(tls_addr).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
        .await
        .unwrap();
    let mut garbage = TcpStream::connect(tls_addr).await.unwrap();
    garbage
        .write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8])
        .await
        .unwrap();
    let _silent = TcpStream::connect(tls_addr).await.unwrap();

    let client = tls_client(ca.roots(), &[b"h2", b"http/1.1"]);
    for _ in 0..5 {
        let (status, _) = get_over(connect(&client, tls_addr, "api.test").await, "api.test").await;
        assert_eq!(status, StatusCode::OK);
    }
    // The bad connections are closed, not answered with HTTP.
    for stream in [&mut plain, &mut garbage] {
        let mut buf = vec![0u8; 1024];
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("closed");
        if let Ok(n) = read {
            assert!(
                !String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/"),
                "answered in plain HTTP"
            );
        }
    }
}

#[tokio::test]
async fn reloading_serves_the_new_certificate_to_new_connections() {
    let ca = TestCa::new("test CA");
    let first = ca.leaf(&["api.test"], None);
    let second = ca.leaf(&["api.test"], None);
    let upstream = TestUpstream::ok("ok").await;
    let (gateway, config_path) = single_cert_gateway("tls-reload", &first, &upstream).await;
    let tls_addr = gateway.tls_addr.unwrap();
    let client = tls_client(ca.roots(), &[b"http/1.1"]);
    let kept = connect(&client, tls_addr, "api.test").await;
    assert_eq!(kept.get_ref().1.peer_certificates().unwrap()[0], first.der);

    let dir = config_path.parent().unwrap();
    // A broken pair changes nothing.
    std::fs::write(dir.join("api.pem"), &second.cert_pem).unwrap();
    assert!(
        gateway
            .certificates
            .reload()
            .unwrap_err()
            .contains("does not match")
    );
    assert_eq!(
        connect(&client, tls_addr, "api.test")
            .await
            .get_ref()
            .1
            .peer_certificates()
            .unwrap()[0],
        first.der
    );

    std::fs::write(dir.join("api.key"), &second.key_pem).unwrap();
    gateway.certificates.reload().unwrap();
    let fresh = connect(&client, tls_addr, "api.test").await;
    assert_eq!(
        fresh.get_ref().1.peer_certificates().unwrap()[0],
        second.der
    );
    // The connection made before the reload keeps working on its session.
    assert_eq!(get_over(kept, "api.test").await.0, StatusCode::OK);
}

fn check(dir: &Path, certs: &str) -> (bool, String) {
    let config = format!(
        "[[server.tls]]\nlisten = \"127.0.0.1:0\"\ncerts = [{certs}]\n[[upstreams]]\nname = \"api\"\nservers = [\"http://127.0.0.1:9\"]\n[[routes]]\nname = \"d\"\nupstream = \"api\"\n"
    );
    std::fs::write(dir.join("gw.toml"), config).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ratelimit-proxy"))
        .args(["check", "--config"])
        .arg(dir.join("gw.toml"))
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_refuses_missing_mismatched_expired_and_empty_certificates_and_warns_on_expiring_ones() {
    let dir = std::env::temp_dir().join(format!("rlp-tls-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = TestCa::new("test CA");
    let good = ca.leaf(&["api.test"], None);
    let other = ca.leaf(&["api.test"], None);
    let expired = ca.leaf(&["api.test"], Some(rcgen::date_time_ymd(2001, 1, 1)));
    let soon = ca.leaf(
        &["api.test"],
        Some(time::OffsetDateTime::now_utc() + time::Duration::days(5)),
    );
    for (name, contents) in [
        ("good.pem", &good.cert_pem),
        ("good.key", &good.key_pem),
        ("other.key", &other.key_pem),
        ("expired.pem", &expired.cert_pem),
        ("expired.key", &expired.key_pem),
        ("soon.pem", &soon.cert_pem),
        ("soon.key", &soon.key_pem),
    ] {
        std::fs::write(dir.join(name), contents).unwrap();
    }
    std::fs::write(dir.join("empty.pem"), "just text, no PEM\n").unwrap();

    let (ok, text) = check(&dir, r#"{ cert = "good.pem", key = "good.key" }"#);
    assert!(ok, "{text}");
    for (certs, expected) in [
        (
            r#"{ cert = "missing.pem", key = "good.key" }"#,
            "missing.pem",
        ),
        (
            r#"{ cert = "good.pem", key = "other.key" }"#,
            "does not match",
        ),
        (
            r#"{ cert = "expired.pem", key = "expired.key" }"#,
            "expired",
        ),
        (
            r#"{ cert = "empty.pem", key = "good.key" }"#,
            "no PEM certificate",
        ),
    ] {
        let (ok, text) = check(&dir, certs);
        assert!(!ok, "{certs} passed check");
        assert!(
            text.contains("server.tls[0].certs[0]") && text.contains(expected),
            "{certs}: {text}"
        );
    }
    let (ok, text) = check(&dir, r#"{ cert = "soon.pem", key = "soon.key" }"#);
    assert!(ok, "{text}");
    assert!(
        text.contains("warning:") && text.contains("expires in"),
        "{text}"
    );
}

#[tokio::test]
async fn https_upstream_connections_are_reused_and_one_closed_while_idle_is_not() {
    let ca = TestCa::new("upstream CA");
    for close_when_idle in [false, true] {
        let (upstream, accepted, closed) = raw_https_upstream(&ca, close_when_idle).await;
        let text = format!(
            "workers = 1\n[[upstreams]]\nname = \"api\"\nservers = [\"https://{upstream}\"]\nca_file = \"ca.pem\"\nsni = \"upstream.test\"\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n"
        );
        let dir = format!("tls-upstream-reuse-{close_when_idle}");
        let (gateway, _) = TestGateway::start_in_dir(&dir, &[("ca.pem", &ca.pem())], &text).await;
        for round in 0..3 {
            // A POST is never sent twice: it succeeds only on a connection known to be open.
            let post = Request::post(gateway.url("/")).body(full("x")).unwrap();
            let (response, body) = send(post).await;
            assert_answer(
                &response,
                &body,
                StatusCode::OK,
                "ok",
                &format!("round {round}, close_when_idle {close_when_idle}"),
            );
            // With close_when_idle, the next request comes once the upstream closed this one.
            let closes = if close_when_idle { round + 1 } else { 0 };
            let idle = support::eventually(std::time::Duration::from_secs(5), || {
                closed.load(std::sync::atomic::Ordering::SeqCst) == closes
            })
            .await;
            assert!(
                idle,
                "round {round}: {closes} connections closed by the upstream"
            );
        }
        let expected = if close_when_idle { 3 } else { 1 };
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), expected);
    }
}
