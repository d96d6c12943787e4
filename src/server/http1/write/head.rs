//! A response head: the status line, the response's fields, the gateway's added fields, the
//! framing and `Date`.

use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::{HeaderMap, StatusCode};
use http_body::Body;

use super::OutgoingBody;
use crate::added_fields::AddedFields;
use crate::http1::encode::encode_field;
use crate::upstream_fields::UpstreamFields;

/// How a response's body is delimited.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Length {
    /// 1xx, 204, 304: no body.
    None,
    Exactly(u64),
    Chunked,
    /// To an HTTP/1.0 client, a body of unknown length ends when the connection closes.
    UntilClose,
    /// An answer to `HEAD` made here: the Content-Length GET's answer would have, and no body.
    Described(u64),
}

/// As hyper decides it: a valid `Content-Length` field, else the body's exact size, else
/// chunked; none for statuses that have no body.
pub(super) fn body_length(status: StatusCode, headers: &HeaderMap, body: &impl Body) -> Length {
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
pub(super) struct Fields<'a> {
    /// The response's header map: a generated response's fields.
    pub(super) own: &'a HeaderMap,
    /// The content type a generated body sets itself (`ResponseBody::content_type`).
    pub(super) content_type: Option<&'static str>,
    /// An upstream response's fields, hop-by-hop and framing ones already left out.
    pub(super) upstream: Option<&'a UpstreamFields>,
    pub(super) added: &'a AddedFields,
}

/// The status line; the response's fields less its framing, its `Connection` and those the
/// added fields replace; a generated body's content type; the framing; the added fields;
/// `Date` unless the response has one; and `Connection: close` when the connection closes
/// after it (`keep-alive` when it stays open for an HTTP/1.0 client, RFC 9112 §9.3).
pub(super) fn encode_head(
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
        Length::Exactly(n) | Length::Described(n) => encode_length(out, n),
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
    pub(super) fn of(headers: &'a HeaderMap, body: &'a impl OutgoingBody) -> Fields<'a> {
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
