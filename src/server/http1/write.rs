//! Writing a response: its head (the status line, its fields, the gateway's added fields, the
//! framing, `Date`) and its body, delimited as RFC 9112 §6 says for the request it answers:
//! no body after a `HEAD` (RFC 9110 §9.3.2), no chunked coding to an HTTP/1.0 client.

use futures_util::FutureExt;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use std::io;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use std::future::poll_fn;
use std::pin::{Pin, pin};

use tokio::io::AsyncRead;

use super::reader::{Pumped, Reader};
use super::{Close, Watch};
use crate::added_fields::AddedFields;
use crate::http1::encode::{encode_field, hex};
use crate::respond::ResponseBody;
use crate::upstream_fields::UpstreamFields;

/// A response's bytes are gathered up to this much before a write.
const WRITE_BATCH: usize = 64 * 1024;
/// Data frames at least this large are written from their own buffer, not copied.
const WRITE_DIRECT: usize = 16 * 1024;

/// How a response's body is delimited.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Length {
    /// 1xx, 204, 304: no body.
    None,
    Exactly(u64),
    Chunked,
    /// To an HTTP/1.0 client, a body of unknown length ends when the connection closes.
    UntilClose,
}

/// What the response answers, as its framing depends on it.
#[derive(Clone, Copy, Debug)]
pub(super) struct AnswerTo {
    /// The connection may serve another request after this response.
    pub keep_alive: bool,
    /// The request was `HEAD`: the head only, its framing fields as for `GET`.
    pub head_only: bool,
    pub http10: bool,
    /// The request said `TE: trailers`: a chunked response carries the upstream's trailers.
    pub takes_trailers: bool,
}

/// Why a response was not written whole; the connection closes after it.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    #[error("writing to the client failed: {0}")]
    Client(#[from] io::Error),
    #[error("the response body failed: {0}")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the response body does not match its Content-Length")]
    Length,
    #[error("the client took nothing sent to it within send_timeout")]
    Stalled,
}

/// Writes the response: its head, then its body as it comes, gathered into few writes. Ok with
/// whether the connection stays open after it.
pub(super) async fn write_response<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    response: Response<ResponseBody>,
    answer_to: AnswerTo,
) -> Result<bool, WriteError> {
    let (parts, mut body) = response.into_parts();
    let mut length = body_length(parts.status, &parts.headers, &body);
    let mut keep_alive = answer_to.keep_alive;
    if answer_to.head_only {
        length = Length::None;
    } else if answer_to.http10 && length == Length::Chunked {
        length = Length::UntilClose;
        keep_alive = false;
    }
    out.clear();
    out.reserve(1024);
    encode_head(
        out,
        parts.status,
        &Fields::of(&parts.headers, &body),
        length,
        (keep_alive, answer_to.http10),
    );
    // The bytes still owed under a Content-Length; None when chunked or until the close.
    let mut left = match length {
        Length::None => {
            drop(body);
            flush(io, out).await?;
            return Ok(keep_alive);
        }
        Length::Exactly(n) => Some(n),
        Length::Chunked | Length::UntilClose => None,
    };
    let chunked = length == Length::Chunked;
    let mut trailers = None;
    while let Some(data) = next_data(io, out, &mut body, &mut trailers).await? {
        push_data(io, out, data, &mut left, chunked).await?;
    }
    // A finished body lets go of its route slot and in-flight count before the response's
    // last bytes go out, as under hyper: a client that sends its next request at once must
    // not find the slot still taken, nor a scrape count the request in flight.
    drop(body);
    match left {
        Some(0) => {}
        Some(_) => return Err(WriteError::Length),
        None if chunked => {
            out.extend_from_slice(b"0\r\n");
            if let Some(trailers) = trailers.filter(|_| answer_to.takes_trailers) {
                for (name, value) in &trailers {
                    encode_field(out, name.as_str(), value.as_bytes());
                }
            }
            out.extend_from_slice(b"\r\n");
        }
        None => {}
    }
    flush(io, out).await?;
    Ok(keep_alive)
}

/// The body's next data; what is gathered is written first when none is ready yet. None at
/// the body's end. Trailers are kept in `trailers`.
async fn next_data<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    body: &mut ResponseBody,
    trailers: &mut Option<HeaderMap>,
) -> Result<Option<Bytes>, WriteError> {
    loop {
        let frame = match body.frame().now_or_never() {
            Some(frame) => frame,
            None => {
                flush(io, out).await?;
                body.frame().await
            }
        };
        match frame {
            None => return Ok(None),
            Some(Err(error)) => return Err(WriteError::Body(error)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => return Ok(Some(data)),
                Ok(_) => {}
                Err(frame) => *trailers = frame.into_trailers().ok(),
            },
        }
    }
}

/// Adds `data` to the response: counted against the length `left`, or framed as a chunk when
/// `chunked`. Large data is written from its own buffer rather than copied.
async fn push_data<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    data: Bytes,
    left: &mut Option<u64>,
    chunked: bool,
) -> Result<(), WriteError> {
    if let Some(left) = left {
        *left = left
            .checked_sub(data.len() as u64)
            .ok_or(WriteError::Length)?;
    } else if chunked {
        let mut digits = [0u8; 16];
        out.extend_from_slice(hex(data.len(), &mut digits));
        out.extend_from_slice(b"\r\n");
    }
    if data.len() >= WRITE_DIRECT {
        flush(io, out).await?;
        io.write_all(&data).await?;
    } else {
        out.extend_from_slice(&data);
    }
    if chunked {
        out.extend_from_slice(b"\r\n");
    }
    if out.len() >= WRITE_BATCH {
        flush(io, out).await?;
    }
    Ok(())
}

async fn flush<S: AsyncWrite + Unpin>(io: &mut S, out: &mut Vec<u8>) -> Result<(), WriteError> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(io.flush().await?)
}

/// Writes a response while the watch looks on and the request body is read as the upstream
/// asks for it: a client that takes nothing for `send_timeout` ends it with
/// `WriteError::Stalled`; shutdown sets `stopping` (the response is finished, then the
/// connection closes).
pub(super) async fn write_watched<S: AsyncRead, W: Watch>(
    mut writing: Pin<&mut impl Future<Output = Result<bool, WriteError>>>,
    reader: &mut Reader<S>,
    watch: &mut W,
    stopping: &mut bool,
) -> Result<bool, WriteError> {
    let mut reading = true;
    loop {
        tokio::select! {
            biased;
            written = writing.as_mut() => return written,
            // A 100 Continue no longer goes out once the answer has begun.
            pumped = poll_fn(|cx| reader.poll_pump(cx)), if reading => {
                reading = pumped != Pumped::Closed;
            }
            close = poll_fn(|cx| watch.poll_close(cx)), if !*stopping => match close {
                Close::Stop | Close::Idle => *stopping = true,
                Close::SlowHead | Close::SendStalled => return Err(WriteError::Stalled),
            },
        }
    }
}

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Sends `100 Continue` while the watch looks on: a client that takes nothing for
/// `send_timeout` (its earlier, pipelined answers fill the socket) is cut, as during any other
/// write. False when the connection must close.
pub(super) async fn send_continue<S: AsyncWrite + Unpin, W: Watch>(
    io: &mut S,
    watch: &mut W,
    stopping: &mut bool,
) -> bool {
    let sending = async {
        io.write_all(CONTINUE).await?;
        io.flush().await
    };
    let mut sending = pin!(sending);
    loop {
        tokio::select! {
            biased;
            sent = sending.as_mut() => return sent.is_ok(),
            close = poll_fn(|cx| watch.poll_close(cx)), if !*stopping => match close {
                Close::Stop | Close::Idle => *stopping = true,
                Close::SlowHead | Close::SendStalled => return false,
            },
        }
    }
}

/// As hyper decides it: a valid `Content-Length` field, else the body's exact size, else
/// chunked; none for statuses that have no body.
fn body_length(status: StatusCode, headers: &HeaderMap, body: &ResponseBody) -> Length {
    use http_body::Body;
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Length::None;
    }
    let mut fields = headers.get_all(CONTENT_LENGTH).iter();
    let declared = match (fields.next(), fields.next()) {
        (Some(value), None) => std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(|text| text.parse::<u64>().ok()),
        _ => None,
    };
    match declared.or_else(|| body.size_hint().exact()) {
        Some(n) => Length::Exactly(n),
        None => Length::Chunked,
    }
}

/// A response's fields, from wherever they are kept.
struct Fields<'a> {
    /// The response's header map: a generated response's fields.
    own: &'a HeaderMap,
    /// The content type a generated body sets itself (`ResponseBody::content_type`).
    content_type: Option<&'static str>,
    /// An upstream response's fields, hop-by-hop and framing ones already left out.
    upstream: Option<&'a UpstreamFields>,
    added: &'a AddedFields,
}

/// The status line; the response's fields less its framing, its `Connection` and those the
/// added fields replace; a generated body's content type; the framing; the added fields;
/// `Date` unless the response has one; and `Connection: close` when the connection closes
/// after it (`keep-alive` when it stays open for an HTTP/1.0 client, RFC 9112 §9.3).
fn encode_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    fields: &Fields<'_>,
    length: Length,
    (keep_alive, http10): (bool, bool),
) {
    // An HTTP/1.0 client is answered in its own version, as hyper answers it (RFC 9110 §6.2
    // allows either).
    out.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    // A bodiless status keeps a Content-Length (a 304's describes what it stands for) except
    // a 204.
    let keeps_length = length == Length::None && status != StatusCode::NO_CONTENT;
    let has_date = fields.encode(out, keeps_length);
    if let Some(content_type) = fields.content_type {
        encode_field(out, "content-type", content_type.as_bytes());
    }
    match length {
        Length::Exactly(n) => encode_length(out, n),
        Length::Chunked => encode_field(out, "transfer-encoding", b"chunked"),
        Length::None | Length::UntilClose => {}
    }
    out.extend_from_slice(fields.added.lines());
    if !has_date {
        date::with_now(|date| encode_field(out, "date", date));
    }
    if !keep_alive {
        encode_field(out, "connection", b"close");
    } else if http10 {
        encode_field(out, "connection", b"keep-alive");
    }
    out.extend_from_slice(b"\r\n");
}

impl<'a> Fields<'a> {
    /// A response's fields: its header map's and what its body holds.
    fn of(headers: &'a HeaderMap, body: &'a ResponseBody) -> Fields<'a> {
        Fields {
            own: headers,
            content_type: body.content_type(),
            upstream: body.upstream_fields(),
            added: body.added(),
        }
    }

    /// Writes the response's own and upstream fields, less the framing, `Connection`, a
    /// `Content-Type` the body sets and those the added fields replace (a kept Content-Length
    /// only when `keeps_length`); true when one was a `Date`.
    fn encode(&self, out: &mut Vec<u8>, keeps_length: bool) -> bool {
        for (name, value) in self.own {
            // The framing is written by `encode_head`, `Connection` by this server.
            let kept = if name == TRANSFER_ENCODING || name == CONNECTION {
                false
            } else if name == CONTENT_TYPE {
                self.content_type.is_none()
            } else if name == CONTENT_LENGTH {
                keeps_length
            } else {
                !self.added.replaces(name.as_str().as_bytes())
            };
            if kept {
                encode_field(out, name.as_str(), value.as_bytes());
            }
        }
        let mut has_date = self.own.contains_key(http::header::DATE);
        if let Some(upstream) = self.upstream {
            upstream.write_lines(out, self.added);
            has_date |= upstream.has_date();
            if let Some(declared) = upstream.content_length().filter(|_| keeps_length) {
                encode_length(out, declared);
            }
        }
        has_date
    }
}

fn encode_length(out: &mut Vec<u8>, length: u64) {
    encode_field(
        out,
        "content-length",
        itoa::Buffer::new().format(length).as_bytes(),
    );
}

/// The `Date` field, formatted once a second per thread.
mod date {
    use std::cell::RefCell;
    use std::io::Write;
    use std::time::{SystemTime, UNIX_EPOCH};

    thread_local! {
        static CACHED: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
    }

    pub fn with_now(write: impl FnOnce(&[u8])) {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        CACHED.with(|cached| {
            let mut cached = cached.borrow_mut();
            if cached.0 != second {
                cached.1.clear();
                let _ = write!(cached.1, "{}", httpdate::HttpDate::from(now));
                cached.0 = second;
            }
            write(&cached.1);
        });
    }
}

#[cfg(test)]
mod tests;
