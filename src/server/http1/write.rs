//! Writing a response: its head (the status line, its fields, the gateway's added fields, the
//! framing, `Date`) and its body, delimited as RFC 9112 §6 says for the request it answers:
//! no body after a `HEAD` (RFC 9110 §9.3.2), no chunked coding to an HTTP/1.0 client.

use std::error::Error;
use std::io;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{HeaderMap, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::fields::added::AddedFields;
use crate::fields::upstream::UpstreamFields;
use crate::http1::encode::{encode_field, hex};
use crate::response::ResponseBody;

mod head;
mod watched;

use crate::http1::encode::{
    ResponseLength as Length, encode_response_head as encode_head, response_length as body_length,
};
use head::Fields;
pub(super) use watched::{send_continue, write_watched};

/// A response's bytes are gathered up to this much before a write.
const WRITE_BATCH: usize = 64 * 1024;
/// Data frames at least this large are written from their own buffer, not copied.
const WRITE_DIRECT: usize = 16 * 1024;

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

/// A response body as the writer takes it: its frames, and the fields it carries for the head
/// (`ResponseBody` in service; scripted bodies in the tests).
pub(super) trait OutgoingBody:
    Body<Data = Bytes, Error = Box<dyn Error + Send + Sync>> + Unpin
{
    /// The content type the body sets itself (a problem's).
    fn content_type(&self) -> Option<&'static str>;
    /// The gateway's fields for the head.
    fn added(&self) -> &AddedFields;
    /// An upstream response's fields, which the header map does not hold.
    fn upstream_fields(&self) -> Option<&UpstreamFields>;
}

impl OutgoingBody for ResponseBody {
    fn content_type(&self) -> Option<&'static str> {
        ResponseBody::content_type(self)
    }

    fn added(&self) -> &AddedFields {
        ResponseBody::added(self)
    }

    fn upstream_fields(&self) -> Option<&UpstreamFields> {
        ResponseBody::upstream_fields(self)
    }
}

/// Writes the response: its head, then its body as it comes, gathered into few writes. Ok with
/// whether the connection stays open after it.
pub(super) async fn write_response<S: AsyncWrite + Unpin, B: OutgoingBody>(
    io: &mut S,
    out: &mut Vec<u8>,
    response: Response<B>,
    answer_to: AnswerTo,
) -> Result<bool, WriteError> {
    let (parts, mut body) = response.into_parts();
    let mut length = body_length(parts.status, &parts.headers, &body);
    let mut keep_alive = answer_to.keep_alive;
    if answer_to.head_only {
        // GET's framing fields (RFC 9110 §9.3.2): an upstream's answer to HEAD carries its own
        // Content-Length in its fields; an answer made here states its body's.
        length = match length {
            Length::Exactly(n) if body.upstream_fields().is_none() => Length::Described(n),
            _ => Length::None,
        };
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
        Length::None | Length::Described(_) => {
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
async fn next_data<S: AsyncWrite + Unpin, B: OutgoingBody>(
    io: &mut S,
    out: &mut Vec<u8>,
    body: &mut B,
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

#[cfg(test)]
mod mock_tests;
#[cfg(test)]
mod tests;
