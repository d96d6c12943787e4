//! For the bypass tests: an upstream that records each request exactly as it received it, a
//! client that sends raw bytes, and the three ways a request reaches the pipeline (the own
//! HTTP/1.1 server, hyper's HTTP/1.1 server, HTTP/2).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{TestBody, TestUpstream, full, h2c_sender};

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Origin-form, as on the request line.
    pub target: String,
    /// Every field, lower-case names, in the order hyper keeps them.
    pub fields: Vec<(String, String)>,
    pub body: Bytes,
    pub trailers: Vec<(String, String)>,
}

impl Recorded {
    pub fn all(&self, name: &str) -> Vec<&str> {
        (self.fields.iter())
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

fn pairs(map: &http::HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(n, v)| {
            let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
            (n.as_str().to_owned(), value)
        })
        .collect()
}

/// An upstream answering `200 ok` that sends each request it got to the receiver.
pub async fn recording_upstream() -> (TestUpstream, mpsc::UnboundedReceiver<Recorded>) {
    let (seen, received) = mpsc::unbounded_channel();
    let upstream = TestUpstream::start(move |request: Request<hyper::body::Incoming>| {
        let seen = seen.clone();
        async move {
            let (parts, body) = request.into_parts();
            let collected = body.collect().await.ok();
            let trailers = collected.as_ref().and_then(|c| c.trailers().cloned());
            let recorded = Recorded {
                method: parts.method.to_string(),
                target: parts
                    .uri
                    .path_and_query()
                    .map_or("", |p| p.as_str())
                    .to_owned(),
                fields: pairs(&parts.headers),
                body: collected.map(|c| c.to_bytes()).unwrap_or_default(),
                trailers: trailers.as_ref().map(pairs).unwrap_or_default(),
            };
            let _ = seen.send(recorded);
            Response::new(full("ok"))
        }
    })
    .await;
    (upstream, received)
}

/// What the upstream received since the last look.
pub fn drain(received: &mut mpsc::UnboundedReceiver<Recorded>) -> Vec<Recorded> {
    std::iter::from_fn(|| received.try_recv().ok()).collect()
}

/// Which server of the gateway reads a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The own HTTP/1.1 server: a plain bodiless request.
    Own,
    /// hyper's HTTP/1.1 server: the same request with `TE: trailers`, which the own server
    /// leaves to hyper (and the gateway strips as hop-by-hop).
    Hyper,
    /// HTTP/2 with prior knowledge (hyper's client and server).
    H2,
}

pub const EVERY_WAY: [Via; 3] = [Via::Own, Via::Hyper, Via::H2];

/// A bodiless request: method, target, `Host` and other fields as the client spells them.
#[derive(Clone, Copy)]
pub struct Raw<'a> {
    pub method: &'a str,
    pub target: &'a str,
    pub fields: &'a [(&'a str, &'a str)],
}

/// What `status_via` returns for an HTTP/2 stream the server reset instead of answering.
pub const RESET: u16 = 0;

/// Whether a status is a refusal of a malformed request: a 400, or over HTTP/2 a reset
/// stream (RFC 9113 §8.1.1 lets a server treat a malformed request so).
pub fn refused(via: Via, status: u16) -> bool {
    status == 400 || (via == Via::H2 && status == RESET)
}

/// A GET of `target` with `fields`, sent the way `via` says; its status.
pub async fn get_via(addr: SocketAddr, via: Via, target: &str, fields: &[(&str, &str)]) -> u16 {
    let raw = Raw {
        method: "GET",
        target,
        fields,
    };
    status_via(addr, via, &raw).await
}

/// Sends `raw` to the gateway at `addr` the way `via` says and returns the status.
pub async fn status_via(addr: SocketAddr, via: Via, raw: &Raw<'_>) -> u16 {
    match via {
        Via::Own | Via::Hyper => raw_status(addr, http1_head(via, raw).as_bytes()).await,
        Via::H2 => h2_status(addr, raw).await,
    }
}

/// `raw` as an HTTP/1.1 head for the server `via` names (Own or Hyper).
pub fn http1_head(via: Via, raw: &Raw<'_>) -> String {
    let mut head = format!("{} {} HTTP/1.1\r\n", raw.method, raw.target);
    for (name, value) in raw.fields {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if via == Via::Hyper {
        head.push_str("TE: trailers\r\n");
    }
    head.push_str("\r\n");
    head
}

/// A new connection on which `GET target` was sent (Host `test`) to the HTTP/1 server `via`
/// names, for a test that then reads the answer, or does not.
pub async fn sent_get(addr: SocketAddr, via: Via, target: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let raw = Raw {
        method: "GET",
        target,
        fields: &[("Host", "test")],
    };
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(http1_head(via, &raw).as_bytes())
        .await
        .unwrap();
    stream
}

/// Sends `bytes` on a new connection and reads one response's status line.
pub async fn raw_status(addr: SocketAddr, bytes: &[u8]) -> u16 {
    let answer = raw_answer(addr, bytes).await;
    let status = answer.get(9..12);
    status
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

/// Sends `bytes` on a new connection and returns what came back until the first response
/// head is complete (plus whatever came with it), within 10 s.
pub async fn raw_answer(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut buf = BytesMut::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await;
        match read.expect("an answer within 10 s") {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

async fn h2_status(addr: SocketAddr, raw: &Raw<'_>) -> u16 {
    let mut sender = h2c_sender(addr).await;
    let host = raw
        .fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"));
    let authority = host.map_or("h2.test", |(_, v)| *v);
    let mut request = Request::builder()
        .method(raw.method)
        .uri(format!("http://{authority}{}", raw.target));
    for (name, value) in raw.fields {
        if !name.eq_ignore_ascii_case("host") {
            request = request.header(*name, *value);
        }
    }
    let request: Request<TestBody> = request.body(super::empty()).unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request));
    match sent.await.expect("an answer within 10 s") {
        Ok(response) => response.status().as_u16(),
        Err(_) => RESET,
    }
}

/// Reads from `stream` until a whole head is in `buffer` (what was read before stays first);
/// where the head ends, or None when the stream ends or fails first. For hand-written peers.
pub async fn read_head<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
) -> Option<usize> {
    loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at + 4);
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}
