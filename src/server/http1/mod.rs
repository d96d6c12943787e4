//! HTTP/1.1 served by the gateway itself for the requests nearly all traffic is made of:
//! well-formed HTTP/1.1 heads with an origin-form target and no body, upgrade, `Expect` or
//! `TE`. hyper's server side (its dispatcher, its buffered connection, its head encoder) cost
//! a proxied request more instructions than parsing and writing the heads here
//! (docs/PERFORMANCE.md, tenth round).
//!
//! Everything else goes to hyper, with every byte read so far: a body, an upgrade, HTTP/1.0,
//! `HEAD`, `CONNECT`, a `Connection` other than `keep-alive`, a malformed or oversized head,
//! the HTTP/2 preface. hyper then serves the connection to its end, as it served every
//! connection before, error answers included; so only well-formed requests are answered here.

use std::future::poll_fn;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use http::header::CONNECTION;
use http::{HeaderMap, Method, Response, Uri, Version};
use http_body_util::{Either, Empty};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::watch::{Activity, Answering};
use crate::canonical::ProxyRequest;
use crate::proxy::headers::{Role, lists, role};
use crate::proxy::{self, ClientConnection, Runtime};
use crate::request_fields::{FieldLines, RequestFields};
use crate::respond::ResponseBody;

/// Most fields in a head served here: hyper's own limit, so a head with more gets hyper's 431.
const MAX_FIELDS: usize = 100;
/// Longest head served here; hyper takes a longer one and applies `max_buf_size` to it.
const MAX_HEAD: usize = 16 * 1024;
/// Bytes read ahead while a request is answered (pipelined requests); past this, reading waits.
const MAX_READ_AHEAD: usize = 64 * 1024;
/// A write buffer grown past this by a large response is not kept for the next.
const MAX_IDLE_WRITE_BUFFER: usize = 128 * 1024;

mod write;

use write::{WriteError, write_response};

/// Why a connection must close now, as the connection's watch tells it.
pub(super) enum Close {
    /// The gateway is shutting down: finish the request being answered, then close.
    Stop,
    /// Idle for `idle_timeout`.
    Idle,
    /// A request head took longer than `header_read_timeout`.
    SlowHead,
    /// The client took nothing sent to it for `send_timeout`.
    SendStalled,
}

/// The connection's watch: shutdown, idle, slow-head and send deadlines.
pub(super) trait Watch {
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Close>;
}

/// How serving here ended.
pub(super) enum Ended<S> {
    Closed,
    /// A request to leave to hyper: the connection and every byte read from it but not served,
    /// which begin at the connection's first byte when `at_start` (only then may they be the
    /// HTTP/2 preface).
    ToHyper {
        io: S,
        read: BytesMut,
        at_start: bool,
    },
}

/// What is needed to answer a request.
pub(super) struct Answerer<'a> {
    pub runtime: &'a ArcSwap<Runtime>,
    pub client: &'a ClientConnection,
    pub activity: &'a Arc<Activity>,
}

/// Serves requests until the connection closes or a request needs hyper.
pub(super) async fn serve<S, W>(mut io: S, answerer: &Answerer<'_>, watch: &mut W) -> Ended<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
    W: Watch,
{
    let mut read = BytesMut::with_capacity(8 * 1024);
    // Allocated by the first response: an idle connection keeps only its read buffer.
    let mut out = Vec::new();
    let mut served_any = false;
    loop {
        let request = loop {
            match parse_request(&mut read) {
                Parsed::Request(request) => break request,
                Parsed::Other => {
                    return Ended::ToHyper {
                        io,
                        read,
                        at_start: !served_any,
                    };
                }
                Parsed::Partial => {}
            }
            tokio::select! {
                biased;
                got = read_more(&mut io, &mut read) => if !got {
                    return Ended::Closed;
                },
                close = poll_fn(|cx| watch.poll_close(cx)) => {
                    if let Close::SlowHead = close {
                        tracing::debug!(peer = %answerer.client.peer, "closing: request head not complete within header_read_timeout");
                    }
                    return Ended::Closed;
                }
            }
        };
        // In flight until its response is written: the watch keeps such a connection and
        // times its writes, not its idleness.
        let answering = Answering::begin(answerer.activity, Version::HTTP_11);
        // Pinned here and only borrowed by `answer`: a future of `answer`'s own that held it
        // was copied whole three times a request (~300 instructions).
        let answered = {
            let handling = pin!(proxy::handle(
                answerer.runtime.load_full(),
                answerer.client.clone(),
                request
            ));
            pin!(answer(&mut io, &mut read, watch, handling)).await
        };
        let Some((response, mut stopping)) = answered else {
            return Ended::Closed;
        };
        served_any = true;
        let keep_alive = !stopping && !asks_to_close(response.headers());
        // Pinned where it is made, as `handling` (`.await` on the call moved it first).
        let written = {
            let writing = pin!(write_response(&mut io, &mut out, response, keep_alive));
            pin!(write_watched(writing, watch, &mut stopping)).await
        };
        drop(answering);
        match &written {
            Err(WriteError::Stalled) => {
                tracing::debug!(peer = %answerer.client.peer, "closing: the client took nothing sent to it within send_timeout");
                return Ended::Closed;
            }
            Err(error) => {
                tracing::debug!(peer = %answerer.client.peer, %error, "closing the connection");
            }
            Ok(()) => {}
        }
        if written.is_err() || !keep_alive || stopping {
            let _ = io.shutdown().await;
            return Ended::Closed;
        }
        if !read.is_empty() {
            // A pipelined head that began to arrive while this one was answered is timed
            // from now.
            answerer.activity.bytes_arrived();
        }
        if out.capacity() > MAX_IDLE_WRITE_BUFFER {
            out = Vec::new();
        }
    }
}

/// Reads what the client sent; false at its end or on an error.
async fn read_more<S: AsyncRead + Unpin>(io: &mut S, read: &mut BytesMut) -> bool {
    if read.capacity() - read.len() < 1024 {
        read.reserve(8 * 1024);
    }
    matches!(io.read_buf(read).await, Ok(n) if n > 0)
}

/// The answer `handling` gives, and whether the gateway began shutting down meanwhile; `None` when
/// the client went away first (its answer is dropped, as hyper drops it: an upstream request
/// in flight is abandoned and the route's slot freed).
async fn answer<S, W>(
    io: &mut S,
    read: &mut BytesMut,
    watch: &mut W,
    mut handling: Pin<&mut impl Future<Output = Response<ResponseBody>>>,
) -> Option<(Response<ResponseBody>, bool)>
where
    S: AsyncRead + Unpin,
    W: Watch,
{
    let mut stopping = false;
    let response = loop {
        tokio::select! {
            biased;
            response = handling.as_mut() => break response,
            got = read_more(io, read), if read.len() < MAX_READ_AHEAD => if !got {
                return None;
            },
            // Only shutdown fires while a request is answered (the watch keeps a connection
            // with one in flight): finish it, then close.
            _ = poll_fn(|cx| watch.poll_close(cx)), if !stopping => stopping = true,
        }
    };
    Some((response, stopping))
}

/// Writes a response while the watch looks on: a client that takes nothing for
/// `send_timeout` ends it with `WriteError::Stalled`; shutdown sets `stopping` (the response
/// is finished, then the connection closes).
async fn write_watched<W: Watch>(
    mut writing: Pin<&mut impl Future<Output = Result<(), WriteError>>>,
    watch: &mut W,
    stopping: &mut bool,
) -> Result<(), WriteError> {
    loop {
        tokio::select! {
            biased;
            written = writing.as_mut() => return written,
            close = poll_fn(|cx| watch.poll_close(cx)), if !*stopping => match close {
                Close::Stop | Close::Idle => *stopping = true,
                Close::SlowHead | Close::SendStalled => return Err(WriteError::Stalled),
            },
        }
    }
}

/// A response that says the connection closes after it.
fn asks_to_close(headers: &HeaderMap) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .any(|value| lists(value.as_bytes(), b"close"))
}

// Returned once a request and matched at once: boxing the request would cost an allocation.
#[expect(clippy::large_enum_variant)]
pub enum Parsed {
    Request(ProxyRequest),
    /// More bytes are needed.
    Partial,
    /// Not a request served here.
    Other,
}

/// What the own server makes of `bytes`: for the fuzz targets.
#[cfg(any(test, fuzzing))]
pub fn parse_for_fuzzing(bytes: &[u8]) -> Parsed {
    parse_request(&mut BytesMut::from(bytes))
}

/// The request head at the start of `read`, split off it when it is one served here; when
/// it is not, `read` is left as it was, for hyper.
fn parse_request(read: &mut BytesMut) -> Parsed {
    if read.is_empty() {
        return Parsed::Partial;
    }
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let mut parsed = httparse::Request::new(&mut []);
    let length = match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut parsed,
        read,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(length)) if length <= MAX_HEAD => length,
        Ok(httparse::Status::Partial) if read.len() < MAX_HEAD => return Parsed::Partial,
        _ => return Parsed::Other,
    };
    let mut fields = FieldLines::default();
    let Some(parts) = parts_served_here(&parsed, &read[..length], &mut fields) else {
        return Parsed::Other;
    };
    let head = read.split_to(length).freeze();
    match Uri::from_maybe_shared(head.slice(parts.target)) {
        Ok(uri) => Parsed::Request(ProxyRequest {
            method: parts.method,
            uri,
            version: Version::HTTP_11,
            fields: RequestFields::Lines(fields.in_head(head)),
            upgrade: None,
            body: Either::Right(Empty::new()),
        }),
        Err(_) => {
            // A target `http` refuses: hyper answers it, from the same bytes.
            let mut again = BytesMut::with_capacity(head.len() + read.len());
            again.extend_from_slice(&head);
            again.extend_from_slice(read);
            *read = again;
            Parsed::Other
        }
    }
}

/// A parsed head's method, and its target's place in the buffer.
struct HeadParts {
    method: Method,
    target: Range<usize>,
}

/// The parts of `head` and its `fields`, when its request is served here: HTTP/1.1, not
/// `HEAD` or `CONNECT`, an origin-form target, every field `served_here`.
fn parts_served_here(
    parsed: &httparse::Request<'_, '_>,
    head: &[u8],
    fields: &mut FieldLines,
) -> Option<HeadParts> {
    let (Some(method), Some(target), Some(1)) = (parsed.method, parsed.path, parsed.version) else {
        return None;
    };
    let method = Method::from_bytes(method.as_bytes())
        .ok()
        .filter(|method| method != Method::HEAD && method != Method::CONNECT)?;
    // httparse hands out slices of the buffer; anything else is left to hyper.
    let start = (target.as_ptr() as usize).wrapping_sub(head.as_ptr() as usize);
    let end = start.checked_add(target.len())?;
    if end > head.len() || !target.starts_with('/') {
        return None;
    }
    for field in parsed.headers.iter() {
        let name = field.name.as_bytes();
        let role = role(name);
        if !served_here(role, name, field.value) {
            return None;
        }
        fields.push(head, name, field.value, role)?;
    }
    Some(HeadParts {
        method,
        target: start..end,
    })
}

/// A field that leaves its request to hyper: a body, an upgrade, `Expect`, `TE`, or a
/// `Connection` other than `keep-alive`. (httparse has checked names and values: tokens,
/// and no control characters but tabs, as `http`'s types require.)
fn served_here(role: Role, name: &[u8], value: &[u8]) -> bool {
    match role {
        Role::Connection => value.eq_ignore_ascii_case(b"keep-alive"),
        Role::ContentLength | Role::TransferEncoding | Role::Upgrade => false,
        Role::HopByHop => !name.eq_ignore_ascii_case(b"te"),
        Role::Override => true,
        Role::EndToEnd => !name.eq_ignore_ascii_case(b"expect"),
        Role::Host => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// Whether the own server serves a request of this version, method and fields.
    fn expected_here(version: &str, method: &str, fields: &[(&str, String)]) -> bool {
        version == "1.1"
            && method != "HEAD"
            && method != "CONNECT"
            && fields.iter().all(|(name, value)| match *name {
                "connection" => value.eq_ignore_ascii_case("keep-alive"),
                "content-length" | "transfer-encoding" | "upgrade" | "expect" | "te" => false,
                _ => true,
            })
    }

    #[test]
    fn a_field_name_longer_than_255_bytes_is_left_to_hyper() {
        for (length, served) in [(255, true), (256, false)] {
            let text = format!("GET / HTTP/1.1\r\n{}: 1\r\n\r\n", "x".repeat(length));
            let mut read = BytesMut::from(text.as_bytes());
            match parse_request(&mut read) {
                Parsed::Request(request) => {
                    assert!(served, "{length}");
                    assert_eq!(request.fields.pairs()[0].0.len(), length);
                }
                _ => assert!(!served && read == text.as_bytes(), "{length}"),
            }
        }
    }

    proptest! {
        /// Whatever arrives, a request is split off the front or the bytes stay as they were,
        /// for hyper: nothing is lost or changed on the way.
        #[test]
        fn any_bytes_are_served_or_left_whole(bytes in vec(any::<u8>(), 0..300)) {
            let mut read = BytesMut::from(&bytes[..]);
            match parse_request(&mut read) {
                Parsed::Request(_) => {
                    prop_assert!(read.len() < bytes.len());
                    prop_assert!(bytes.ends_with(&read));
                }
                Parsed::Partial | Parsed::Other => prop_assert_eq!(&read[..], &bytes[..]),
            }
        }

        /// A well-formed head is served with its method, target and fields exactly when
        /// nothing in it needs hyper; the bytes after it stay for the next request.
        #[test]
        fn a_head_is_served_with_its_parts_or_left_to_hyper(
            method in prop_oneof![Just("GET"), Just("POST"), Just("DELETE"), Just("HEAD"), Just("CONNECT")],
            target in "/[a-z0-9/.=&-]{0,16}(\\?[a-z0-9=&]{0,8})?",
            version in prop_oneof![Just("1.1"), Just("1.0")],
            fields in vec((
                prop_oneof![Just("host"), Just("x-api-key"), Just("accept"), Just("connection"),
                    Just("content-length"), Just("transfer-encoding"), Just("upgrade"),
                    Just("expect"), Just("te")],
                prop_oneof![Just("keep-alive".to_string()), Just("Keep-Alive".to_string()),
                    Just("close".to_string()), "[a-zA-Z0-9]([a-zA-Z0-9 ;=]{0,8}[a-zA-Z0-9])?"],
            ), 0..6),
            next in prop_oneof![Just(""), Just("GET /next HTTP/1.1\r\n\r\n")],
        ) {
            let mut text = format!("{method} {target} HTTP/{version}\r\n");
            for (name, value) in &fields {
                text.push_str(&format!("{name}: {value}\r\n"));
            }
            text.push_str("\r\n");
            let head_length = text.len();
            text.push_str(next);
            let mut read = BytesMut::from(text.as_bytes());
            match parse_request(&mut read) {
                Parsed::Request(request) => {
                    prop_assert!(expected_here(version, method, &fields));
                    prop_assert_eq!(request.method.as_str(), method);
                    prop_assert_eq!(request.uri.to_string(), target);
                    let sent: Vec<(String, String)> =
                        fields.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
                    prop_assert_eq!(request.fields.pairs(), sent);
                    prop_assert_eq!(&read[..], &text.as_bytes()[head_length..]);
                }
                Parsed::Other => {
                    prop_assert!(!expected_here(version, method, &fields));
                    prop_assert_eq!(&read[..], text.as_bytes());
                }
                Parsed::Partial => prop_assert!(false, "a whole head is not partial"),
            }
        }
    }
}
