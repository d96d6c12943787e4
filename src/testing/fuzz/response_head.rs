//! The upstream client's response reader (head, then body framing) on arbitrary bytes: it reads
//! the same response however the bytes are split as they arrive, and the same status and body
//! as hyper's HTTP/1 client, or both refuse the bytes.

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::runtime;
use crate::upstream::http1::Framing;
use crate::upstream::http1::for_fuzzing::{MAX_HEAD_BYTES, decode, parse_head};

/// A response as read: status, the fields passed on, body, trailers, whether the connection
/// may be reused, and the bytes after the body.
#[derive(Debug, PartialEq)]
struct Read {
    status: StatusCode,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    keep_alive: bool,
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
    after: Vec<u8>,
}

/// `bytes`: a flags byte (bit 0: the request was `HEAD`), four piece sizes, then the wire.
pub fn response_head(bytes: &[u8]) {
    let [flags, a, b, c, d, wire @ ..] = bytes else {
        return;
    };
    let head_request = flags & 1 == 1;
    let pieces = [a, b, c, d].map(|&size| usize::from(size) + 1);
    let whole = read(wire, &[wire.len().max(1)], head_request);
    let split = read(wire, &pieces, head_request);
    assert_eq!(whole, split, "whole vs in pieces of {pieces:?}");
    let hyper = read_by_hyper(wire, head_request);
    match (&whole, &hyper) {
        (Ok(own), Ok((status, body))) => {
            assert_eq!(own.status, *status);
            // A 101's connection carries another protocol: there is no body to compare.
            if own.status != StatusCode::SWITCHING_PROTOCOLS {
                assert_eq!(own.body, *body);
            }
        }
        (Err(_), Err(_)) => {}
        // By design: at most 32 trailer fields (`body::decode_trailers`), where hyper takes
        // as many as head fields (128 for both here, so a head with too many fails both).
        (Err(own), Ok(_)) if own.ends_with("too many headers") => {}
        // By design: every trailer line ends in CRLF (RFC 9112 §7.1); hyper reads a bare LF
        // as part of a line and ends the section at the first CRLF CRLF.
        (Err(own), Ok(_)) if own.ends_with("bare LF in the trailer section") => {}
        // By design (RFC 9110 §15): a status over 599 is a 502; hyper passes 600 to 999 on.
        (Err(own), Ok(_)) if own.ends_with("status code out of range") => {}
        // By design: only chunked is decoded, so a body under another transfer coding is
        // refused rather than passed on as if it had none; hyper passes it on.
        (Err(own), Ok(_)) if own.ends_with("a transfer coding other than chunked") => {}
        _ => panic!("own {whole:?} vs hyper {hyper:?}"),
    }
}

/// The response in `wire` read as `Connection` does (1xx other than 101 skipped), the bytes
/// arriving in pieces of `pieces` sizes in turn, then the upstream's close.
fn read(wire: &[u8], pieces: &[usize], head_request: bool) -> Result<Read, String> {
    let mut buf = BytesMut::new();
    let mut rest = wire;
    let mut sizes = pieces.iter().cycle();
    let mut arrive = |buf: &mut BytesMut| {
        let n = (*sizes.next().expect("a size")).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        n > 0
    };
    let head = loop {
        match parse_head(&mut buf, head_request).map_err(|e| e.to_string())? {
            // An interim answer: what follows it may begin the response.
            Some(head)
                if head.response.status().is_informational()
                    && head.response.status() != StatusCode::SWITCHING_PROTOCOLS => {}
            Some(head) => break head,
            None if buf.len() >= MAX_HEAD_BYTES => return Err("head too large".into()),
            None if !arrive(&mut buf) => return Err("closed inside the head".into()),
            None => {}
        }
    };
    let mut read = Read {
        status: head.response.status(),
        fields: (head.fields.iter())
            .map(|(name, value)| (name.to_vec(), value.to_vec()))
            .collect(),
        keep_alive: head.keep_alive,
        body: Vec::new(),
        trailers: None,
        after: Vec::new(),
    };
    let mut framing = head.framing;
    loop {
        while let Some(frame) = decode(&mut framing, &mut buf).map_err(|e| e.to_string())? {
            match frame.into_data() {
                Ok(data) => read.body.extend_from_slice(&data),
                Err(frame) => read.trailers = frame.into_trailers().ok(),
            }
        }
        if matches!(framing, Framing::Done | Framing::Upgraded) {
            break;
        }
        if !arrive(&mut buf) {
            if framing != Framing::UntilClose {
                return Err("body cut".into());
            }
            break;
        }
    }
    read.after = [&buf[..], rest].concat();
    Ok(read)
}

/// The status and body hyper's HTTP/1 client reads from `wire`, sent as the answer to a `GET`
/// (or `HEAD`) of `/` and followed by the server's close.
fn read_by_hyper(wire: &[u8], head_request: bool) -> Result<(StatusCode, Bytes), String> {
    runtime().block_on(async {
        let (client, mut server) = tokio::io::duplex(wire.len() + 64 * 1024);
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .max_headers(128)
            .handshake::<_, Empty<Bytes>>(TokioIo::new(client))
            .await
            .map_err(|e| e.to_string())?;
        let method = if head_request {
            Method::HEAD
        } else {
            Method::GET
        };
        let request = Request::builder()
            .method(method)
            .uri("/")
            .body(Empty::new());
        let exchange = async move {
            let response = sender
                .send_request(request.expect("a valid request"))
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response.into_body().collect().await;
            Ok((status, body.map_err(|e| e.to_string())?.to_bytes()))
        };
        // The answer comes once the request is read, as from a server: hyper takes bytes
        // before its request is written for a broken connection.
        let answer = async move {
            let mut request = Vec::new();
            while !request.ends_with(b"\r\n\r\n") {
                if server.read_buf(&mut request).await.unwrap_or(0) == 0 {
                    return;
                }
            }
            server.write_all(wire).await.expect("the pipe has room");
            server.shutdown().await.expect("the pipe is open");
            // Held until hyper is done: a dropped end would cut what it writes.
            std::future::pending::<()>().await;
        };
        tokio::select! {
            biased;
            (read, _) = async { tokio::join!(exchange, connection) } => read,
            () = answer => unreachable!("the answer waits forever"),
        }
    })
}
