//! Writing a response head as a server sends it: the status line, the caller's fields, the
//! framing a body of its length needs (RFC 9112 §6), `Date` and the connection's fate.

use http::header::CONTENT_LENGTH;
use http::{HeaderMap, StatusCode};
use http_body::Body;

use super::encode_field;

/// How a response's body is delimited.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum ResponseLength {
    /// 1xx, 204, 304: no body.
    None,
    Exactly(u64),
    Chunked,
    /// To an HTTP/1.0 client, a body of unknown length ends when the connection closes.
    UntilClose,
    /// An answer to `HEAD`: the Content-Length GET's answer would have, and no body.
    Described(u64),
}

/// As hyper decides it: a valid `Content-Length` field, else the body's exact size, else
/// chunked; none for statuses that have no body.
pub(crate) fn response_length(
    status: StatusCode,
    headers: &HeaderMap,
    body: &impl Body,
) -> ResponseLength {
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return ResponseLength::None;
    }
    let mut fields = headers.get_all(CONTENT_LENGTH).iter();
    let declared = match (fields.next(), fields.next()) {
        (Some(value), None) => std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(|text| text.parse::<u64>().ok()),
        _ => None,
    };
    match declared.or_else(|| body.size_hint().exact()) {
        Some(n) => ResponseLength::Exactly(n),
        None => ResponseLength::Chunked,
    }
}

/// A response's fields as the caller keeps them.
pub(crate) trait ResponseHeadFields {
    /// Writes the fields that go before the framing, less the framing fields and `Connection`
    /// (a Content-Length only when `keeps_length`); true when one was a `Date`.
    fn encode_fields(&self, out: &mut Vec<u8>, keeps_length: bool) -> bool;
    /// A content type the body sets itself, written after the fields.
    fn content_type(&self) -> Option<&'static str>;
    /// Lines written after the framing (already encoded).
    fn lines_after_framing(&self) -> &[u8];
}

/// The status line; the caller's fields; its content type; the framing; the lines after the
/// framing; `Date` unless the fields had one; and `Connection: close` when the connection
/// closes after it (`keep-alive` when it stays open for an HTTP/1.0 client, RFC 9112 §9.3).
pub(crate) fn encode_response_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    fields: &impl ResponseHeadFields,
    length: ResponseLength,
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
    let keeps_length = length == ResponseLength::None && status != StatusCode::NO_CONTENT;
    let has_date = fields.encode_fields(out, keeps_length);
    if let Some(content_type) = fields.content_type() {
        encode_field(out, "content-type", content_type.as_bytes());
    }
    match length {
        ResponseLength::Exactly(n) | ResponseLength::Described(n) => encode_length(out, n),
        ResponseLength::Chunked => encode_field(out, "transfer-encoding", b"chunked"),
        ResponseLength::None | ResponseLength::UntilClose => {}
    }
    out.extend_from_slice(fields.lines_after_framing());
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

/// A `Content-Length` line.
pub(crate) fn encode_length(out: &mut Vec<u8>, length: u64) {
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

    pub(super) fn with_now(write: impl FnOnce(&[u8])) {
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
