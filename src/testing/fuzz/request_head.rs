//! The own HTTP/1 server's request reading against hyper's HTTP/1 server on the same bytes
//! (followed by the client's close): both take a request or neither does, and when both do,
//! the method, target, version, fields and body bytes agree. Where the own server is stricter
//! by design, `differs_by_design` names the rule and its RFC section; anything else that
//! differs is a finding. A request line's `HTTP/1.2` to `HTTP/1.9`, which hyper refuses and
//! the own server reads as HTTP/1.1, is given to hyper as `HTTP/1.1`.

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;

use bytes::Bytes;
use http::{Method, Request, Response, Uri, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

use super::runtime;
use crate::http1::HeadError;
use crate::http1::request_head::{LineVersion, ReadRequest, line_version, read_for_fuzzing};
use crate::request::canonical::ProxyRequest;

/// A request as read: its field names in lowercase, in order of name; its body, or why it
/// could not be read whole.
#[derive(Debug, PartialEq)]
pub struct Read {
    pub method: Method,
    pub target: Uri,
    pub version: Version,
    pub fields: Vec<(String, String)>,
    pub body: Result<Vec<u8>, ()>,
}

/// How the two servers read `bytes`.
#[derive(Debug)]
pub enum Compared {
    Same,
    /// The own server refuses what hyper reads, for a reason RFC 9112 gives.
    StricterByDesign(&'static str),
}

pub fn request_head(bytes: &[u8]) {
    compare(bytes).unwrap_or_else(|finding| panic!("{finding}"));
}

/// Compares the two servers on `bytes`; Err describes a difference no rule explains.
pub fn compare(bytes: &[u8]) -> Result<Compared, String> {
    let own = read_for_fuzzing::<ProxyRequest>(bytes);
    let hyper = read_by_hyper(&as_hyper_reads_http11(bytes));
    match (own, hyper) {
        (ReadRequest::Request(request, body), Some(hyper)) => {
            if let (Err(reason), Ok(_)) = (&body, &hyper.body)
                && let Some(rule) = body_refused_by_design(reason)
            {
                return Ok(Compared::StricterByDesign(rule));
            }
            let own = own_read(&request, body);
            // hyper ends a body cut short with an error; so does the own reader: only the
            // bytes of a complete body are compared.
            if own.body.is_err() && hyper.body.is_err() {
                return same_head(&own, &hyper);
            }
            if own == hyper {
                Ok(Compared::Same)
            } else {
                Err(format!("own {own:?}\nhyper {hyper:?}"))
            }
        }
        (ReadRequest::Request(request, _), None) => Err(format!(
            "read here, refused by hyper: {:?}",
            own_read(&request, Ok(Vec::new()))
        )),
        // RFC 9112 §2.2: a server may wait for the rest of a head, never act on part of one.
        (ReadRequest::Partial, None) => Ok(Compared::Same),
        (ReadRequest::Partial, Some(hyper)) => {
            Err(format!("hyper read {hyper:?} from a partial head"))
        }
        (ReadRequest::Refused(_), None) => Ok(Compared::Same),
        (ReadRequest::Refused(error), Some(hyper)) => match differs_by_design(&error) {
            Some(rule) => Ok(Compared::StricterByDesign(rule)),
            None => Err(format!("refused here ({error}), read by hyper: {hyper:?}")),
        },
    }
}

/// `bytes` with a request line's `HTTP/1.<d>`, `d` above 1, as `HTTP/1.1`: the own server
/// reads the one as the other (RFC 9110 §2.5: a recipient uses the highest minor version it
/// implements) where hyper answers 400; the rest of the message is compared alike.
fn as_hyper_reads_http11(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    match line_version(bytes) {
        LineVersion::HigherMinor(minor) => {
            let mut bytes = bytes.to_vec();
            bytes[minor] = b'1';
            bytes.into()
        }
        _ => bytes.into(),
    }
}

fn same_head(own: &Read, hyper: &Read) -> Result<Compared, String> {
    let head = |read: &Read| {
        (
            read.method.clone(),
            read.target.clone(),
            read.version,
            read.fields.clone(),
        )
    };
    if head(own) == head(hyper) {
        Ok(Compared::Same)
    } else {
        Err(format!("own {own:?}\nhyper {hyper:?}"))
    }
}

/// The chunked bodies the own reader refuses and hyper reads, each with the rule behind it.
fn body_refused_by_design(reason: &str) -> Option<&'static str> {
    match reason {
        "bare LF in the trailer section" | "bare LF in chunk line" | "bare CR in chunk line" => {
            Some(
                "RFC 9112 §7.1: chunk lines and the trailer section end in CRLF; a bare LF or \
                 CR may end them elsewhere for the upstream (RFC 9112 §2.2 lets a recipient \
                 refuse it)",
            )
        }
        // Found by fuzz/request_head: hyper drops a trailer section it cannot parse and keeps
        // the body; the own reader refuses the message, as it refuses such a head.
        reason if reason.starts_with("malformed trailer section") => Some(
            "RFC 9112 §7.1.2: trailer fields have the syntax of header fields; a section that \
             does not parse is refused",
        ),
        _ => None,
    }
}

/// The refusals hyper does not make, each with the rule behind it.
fn differs_by_design(error: &HeadError) -> Option<&'static str> {
    match error {
        HeadError::Framing("Transfer-Encoding in an HTTP/1.0 request") => {
            Some("RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing")
        }
        HeadError::Framing("both Transfer-Encoding and Content-Length") => Some(
            "RFC 9112 §6.3 item 3: a request with both may be an attempt at smuggling; refused",
        ),
        HeadError::Coding(_) => {
            Some("RFC 9112 §6.1: a coding the gateway does not undo before chunked is answered 501")
        }
        HeadError::Framing("chunked applied more than once") => Some(
            "RFC 9112 §6.1: chunked is applied once; a body said to be chunked twice is refused",
        ),
        HeadError::Framing("repeated Content-Length") => {
            Some("RFC 9110 §8.6: a Content-Length given twice, even with one value, is refused")
        }
        _ => None,
    }
}

fn own_read(request: &ProxyRequest, body: Result<Vec<u8>, String>) -> Read {
    Read {
        method: request.method.clone(),
        target: request.uri.clone(),
        version: request.version,
        fields: in_name_order(request.fields.pairs()),
        body: body.map_err(|_| ()),
    }
}

/// The fields in order of name: the order of different names carries no meaning (RFC 9110
/// §5.3) and hyper's map does not keep it; a stable sort keeps each name's values in order.
fn in_name_order(mut fields: Vec<(String, String)>) -> Vec<(String, String)> {
    for (name, _) in &mut fields {
        name.make_ascii_lowercase();
    }
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    fields
}

/// The first request hyper's HTTP/1 server hands its service from `bytes` followed by the
/// client's close, with its body read; `None` when it hands none (it answered 400, 431, or
/// saw the head cut).
pub fn read_by_hyper(bytes: &[u8]) -> Option<Read> {
    let seen: Rc<RefCell<Option<Read>>> = Rc::default();
    let service = {
        let seen = seen.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let seen = seen.clone();
            let (parts, body) = request.into_parts();
            let first = seen.borrow().is_none();
            if first {
                *seen.borrow_mut() = Some(hyper_head(&parts));
            }
            async move {
                let read = body.collect().await.map(|b| b.to_bytes().to_vec());
                if let (true, Some(seen)) = (first, seen.borrow_mut().as_mut()) {
                    seen.body = read.map_err(|_| ());
                }
                Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
            }
        })
    };
    runtime().block_on(async {
        // Room for every answer hyper writes: nobody reads them.
        let (mut client, server) = tokio::io::duplex(bytes.len() + 64 * 1024);
        client.write_all(bytes).await.expect("the pipe has room");
        client.shutdown().await.expect("the pipe is open");
        let connection = hyper::server::conn::http1::Builder::new()
            .header_read_timeout(None)
            // The client's close comes right after its bytes: reading on to it must not
            // drop the request being answered.
            .half_close(true)
            .serve_connection(TokioIo::new(server), service);
        let _ = connection.await;
    });
    seen.take()
}

fn hyper_head(parts: &http::request::Parts) -> Read {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let fields = (parts.headers.iter())
        .map(|(name, value)| (name.as_str().to_owned(), text(value.as_bytes())))
        .collect();
    Read {
        method: parts.method.clone(),
        target: parts.uri.clone(),
        version: parts.version,
        fields: in_name_order(fields),
        // Until the body is read: a body hyper never got to is not a body it read.
        body: Err(()),
    }
}
