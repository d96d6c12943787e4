//! Writing a response: its head (the status line, its fields, the gateway's added fields, the
//! framing, `Date`) and its body, delimited as hyper would.

use futures_util::FutureExt;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::added_fields::AddedFields;
use crate::proxy::http1::hex;
use crate::respond::ResponseBody;

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
}

/// Writes the response; an error when the client went away or the body failed or did not
/// match its length, after which the connection must close.
pub(super) async fn write_response<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    response: Response<ResponseBody>,
    keep_alive: bool,
) -> Result<(), ()> {
    let (parts, mut body) = response.into_parts();
    let length = body_length(parts.status, &parts.headers, &body);
    out.clear();
    out.reserve(1024);
    encode_head(out, &parts, body.added(), length, keep_alive);
    if length == Length::None {
        return flush(io, out).await;
    }
    let mut left = match length {
        Length::Exactly(n) => Some(n),
        _ => None,
    };
    loop {
        let frame = match body.frame().now_or_never() {
            Some(frame) => frame,
            None => {
                flush(io, out).await?;
                body.frame().await
            }
        };
        let data = match frame {
            None => break,
            Some(Err(error)) => {
                tracing::debug!(%error, "response body failed; closing the connection");
                return Err(());
            }
            // Trailers are sent only to a request with `TE: trailers`, which hyper serves.
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        if data.is_empty() {
            continue;
        }
        if let Some(left) = &mut left {
            *left = left.checked_sub(data.len() as u64).ok_or(())?;
        } else {
            let mut digits = [0u8; 16];
            out.extend_from_slice(hex(data.len(), &mut digits));
            out.extend_from_slice(b"\r\n");
        }
        if data.len() >= WRITE_DIRECT {
            flush(io, out).await?;
            io.write_all(&data).await.map_err(|_| ())?;
        } else {
            out.extend_from_slice(&data);
        }
        if left.is_none() {
            out.extend_from_slice(b"\r\n");
        }
        if out.len() >= WRITE_BATCH {
            flush(io, out).await?;
        }
    }
    match left {
        Some(0) => {}
        Some(_) => return Err(()),
        None => out.extend_from_slice(b"0\r\n\r\n"),
    }
    flush(io, out).await
}

async fn flush<S: AsyncWrite + Unpin>(io: &mut S, out: &mut Vec<u8>) -> Result<(), ()> {
    if !out.is_empty() {
        io.write_all(out).await.map_err(|_| ())?;
        out.clear();
    }
    io.flush().await.map_err(|_| ())
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

/// The status line, the response's fields less its framing ones, the framing, `Date` unless
/// the response has one, and `Connection: close` when the connection closes after it.
fn encode_head(
    out: &mut Vec<u8>,
    parts: &http::response::Parts,
    added: &AddedFields,
    length: Length,
    keep_alive: bool,
) {
    let (status, headers) = (parts.status, &parts.headers);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        let framing = name == CONTENT_LENGTH || name == TRANSFER_ENCODING;
        if (framing && length != Length::None) || name == CONNECTION || added.replaces(name) {
            continue;
        }
        if name == TRANSFER_ENCODING || (name == CONTENT_LENGTH && status == StatusCode::NO_CONTENT)
        {
            continue;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    match length {
        Length::Exactly(n) => field(
            out,
            b"content-length",
            itoa::Buffer::new().format(n).as_bytes(),
        ),
        Length::Chunked => field(out, b"transfer-encoding", b"chunked"),
        Length::None => {}
    }
    out.extend_from_slice(added.lines());
    if !headers.contains_key(http::header::DATE) {
        date::with_now(|date| field(out, b"date", date));
    }
    if !keep_alive {
        field(out, b"connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
}

fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
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
