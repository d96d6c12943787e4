//! Reading a request head off a connection's buffer: the request line and fields (httparse,
//! as hyper parses them), how the body is framed (RFC 9112 §6.3) and what the connection does
//! after the request (RFC 9112 §9.3). The request itself is the server's type, built from the
//! head's parts where the head is parsed (`FromParts`).

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::BytesMut;
use http::{Method, Uri, Version};

use super::HeadError;
use super::connection::ConnectionOptions;
use super::fields::{Role, list_items, role};
use super::framing::{header_map, parse_decimal};
use super::request_fields::{FieldLines, RequestFields};
pub(crate) use version::{LineVersion, line_version};

pub(crate) mod version;

/// What a server makes of a request head's parts: its request, with no body or upgrade yet.
/// Built where the head is parsed and returned once, not built from a head type of its own:
/// each move of a request is a copy of a few hundred bytes.
pub(crate) trait FromParts {
    fn from_parts(method: Method, uri: Uri, version: Version, fields: RequestFields) -> Self;
}

/// Most fields in a request head, as hyper allows.
pub(crate) const MAX_FIELDS: usize = 100;

/// How a request's body is delimited.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum BodyLength {
    None,
    Exactly(u64),
    Chunked,
}

/// A request head as read, and what it says about its body and its connection.
pub(crate) struct Arriving<R> {
    /// The request, with no body or upgrade yet: the caller connects those.
    pub request: R,
    pub body: BodyLength,
    /// The client may send another request on the connection after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request with a body (RFC 9110 §10.1.1).
    pub expects_continue: bool,
    /// The request lists an `Upgrade`.
    pub asks_upgrade: bool,
    /// `TE: trailers`: the client takes trailers in a chunked response (RFC 9110 §10.1.4).
    pub takes_trailers: bool,
}

// Returned once a request and matched at once: the request is not boxed, though it is much
// larger than the other variants (boxing it would cost an allocation).
pub(crate) enum Parsed<R> {
    Request(Arriving<R>),
    /// More bytes are needed.
    Partial,
    Refused(HeadError),
}

/// The request head at the start of `read`, split off it once complete. A head still
/// incomplete at `max_head` bytes is refused.
pub(crate) fn parse_request<R: FromParts>(read: &mut BytesMut, max_head: usize) -> Parsed<R> {
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
        Ok(httparse::Status::Complete(length)) if length <= max_head => length,
        Ok(httparse::Status::Partial) if read.len() < max_head => return Parsed::Partial,
        Ok(_) => return Parsed::Refused(HeadError::TooLarge(max_head)),
        Err(httparse::Error::TooManyHeaders) => {
            return Parsed::Refused(HeadError::TooManyFields(MAX_FIELDS));
        }
        // RFC 9113 §3.4: the preface means HTTP/2 only as a connection's first bytes.
        Err(httparse::Error::Version) if read.starts_with(b"PRI * HTTP/2.0\r\n") => {
            return Parsed::Refused(HeadError::LatePreface);
        }
        Err(httparse::Error::Version) => return other_version(read, max_head),
        Err(error) => return Parsed::Refused(HeadError::Malformed(error)),
    };
    // Filled in place and moved once, into the request: a head's fields are a few hundred
    // bytes, and each move of them is a copy.
    let mut lines = FieldLines::default();
    let (parts, framing) = match arriving(&parsed, &read[..length], &mut lines) {
        Ok(read) => read,
        Err(error) => return Parsed::Refused(error),
    };
    // A head whose lines do not fit `FieldLines`' places (a name over 255 bytes, a head over
    // 64 KiB) keeps its fields as a map.
    let fields = match framing.fits_lines {
        true => None,
        false => Some(header_map(parsed.headers)),
    };
    let head = read.split_to(length).freeze();
    let Ok(uri) = Uri::from_maybe_shared(head.slice(parts.target)) else {
        return Parsed::Refused(HeadError::Target);
    };
    let fields = match fields {
        None => RequestFields::Lines(lines.in_head(head)),
        Some(map) => RequestFields::Map(map),
    };
    Parsed::Request(Arriving {
        request: R::from_parts(parts.method, uri, parts.version, fields),
        body: framing.body,
        keep_alive: framing.keep_alive,
        expects_continue: framing.expects_continue,
        asks_upgrade: framing.asks_upgrade,
        takes_trailers: framing.takes_trailers,
    })
}

/// A request line httparse refused for its version: HTTP/1.x above 1.1 is read as HTTP/1.1
/// (RFC 9110 §2.5), a well-formed other major version is a 505 (RFC 9110 §15.6.6), anything
/// else a malformed request line (400, RFC 9112 §3), as nginx answers each.
fn other_version<R: FromParts>(read: &mut BytesMut, max_head: usize) -> Parsed<R> {
    match line_version(read) {
        LineVersion::HigherMinor(minor) => {
            // The version is not kept as sent: what follows reads an HTTP/1.1 request.
            read[minor] = b'1';
            parse_request(read, max_head)
        }
        LineVersion::Partial if read.len() < max_head => Parsed::Partial,
        LineVersion::Partial => Parsed::Refused(HeadError::TooLarge(max_head)),
        LineVersion::Unsupported => Parsed::Refused(HeadError::Version),
        // Not refused for its version, then: a malformed request line.
        LineVersion::Implemented | LineVersion::Malformed => {
            Parsed::Refused(HeadError::Malformed(httparse::Error::Version))
        }
    }
}

/// A parsed head's parts, as places in its bytes.
struct HeadParts {
    method: Method,
    target: Range<usize>,
    version: Version,
}

/// What a head's fields say about its body and connection.
struct Framing {
    body: BodyLength,
    keep_alive: bool,
    expects_continue: bool,
    asks_upgrade: bool,
    takes_trailers: bool,
    /// The fields fit `FieldLines`' places (names up to 255 bytes, heads up to 64 KiB).
    fits_lines: bool,
}

fn arriving(
    parsed: &httparse::Request<'_, '_>,
    head: &[u8],
    lines: &mut FieldLines,
) -> Result<(HeadParts, Framing), HeadError> {
    let (Some(method), Some(target), Some(minor)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(HeadError::Framing("incomplete request line"));
    };
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| HeadError::Target)?;
    let version = if minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    // httparse hands out slices of the buffer.
    let start = (target.as_ptr() as usize).wrapping_sub(head.as_ptr() as usize);
    let target = start..start + target.len();
    if target.end > head.len() {
        return Err(HeadError::Target);
    }
    let framing = read_fields(parsed.headers, head, version, lines)?;
    Ok((
        HeadParts {
            method,
            target,
            version,
        },
        framing,
    ))
}

/// Reads the fields: framing, connection options, expectation, and the fields as `lines` of
/// the head, if they fit.
fn read_fields(
    fields: &[httparse::Header<'_>],
    head: &[u8],
    version: Version,
    lines: &mut FieldLines,
) -> Result<Framing, HeadError> {
    let mut fits_lines = true;
    let mut content_length = Ok(None);
    let mut codings: Option<Vec<&[u8]>> = None;
    let mut connection = ConnectionOptions::default();
    let (mut expects_continue, mut asks_upgrade) = (false, false);
    let mut takes_trailers = false;
    for field in fields {
        let name = field.name.as_bytes();
        let role = role(name);
        match role {
            Role::ContentLength => add_length(&mut content_length, field.value),
            Role::TransferEncoding => codings
                .get_or_insert_with(Vec::new)
                .extend(list_items(field.value)),
            Role::Connection => connection.add(field.value),
            Role::Upgrade => asks_upgrade = true,
            Role::HopByHop if name.eq_ignore_ascii_case(b"te") => {
                takes_trailers |=
                    list_items(field.value).any(|t| t.eq_ignore_ascii_case(b"trailers"));
            }
            Role::EndToEnd if name.eq_ignore_ascii_case(b"expect") => {
                expects_continue |= field.value.eq_ignore_ascii_case(b"100-continue");
            }
            _ => {}
        }
        fits_lines = fits_lines && lines.push(head, name, field.value, role).is_some();
    }
    let body = body_length(codings.as_deref(), content_length, version)?;
    Ok(Framing {
        body,
        keep_alive: connection.keeps_alive(version),
        expects_continue: expects_continue
            && version == Version::HTTP_11
            && body != BodyLength::None,
        asks_upgrade,
        takes_trailers,
        fits_lines,
    })
}

/// One Content-Length, one decimal: a list or a repetition, even of one value, is refused as
/// nginx and hyper refuse it (RFC 9110 §8.6 lets a recipient refuse it; RFC 9112 §6.3 item 5).
fn add_length(seen: &mut Result<Option<u64>, &'static str>, value: &[u8]) {
    *seen = match (*seen, parse_decimal(value)) {
        (Err(error), _) => Err(error),
        (Ok(Some(_)), _) => Err("repeated Content-Length"),
        (Ok(None), None) => Err("invalid Content-Length"),
        (Ok(None), Some(n)) => Ok(Some(n)),
    };
}

/// RFC 9112 §6.3: chunked when it is the final transfer coding; a request with another final
/// coding, or with Transfer-Encoding beside Content-Length or in HTTP/1.0, cannot be framed
/// reliably (400, the connection closes). Codings before `chunked` are not undone here (501).
fn body_length(
    codings: Option<&[&[u8]]>,
    content_length: Result<Option<u64>, &'static str>,
    version: Version,
) -> Result<BodyLength, HeadError> {
    let Some(codings) = codings else {
        return match content_length.map_err(HeadError::Framing)? {
            None | Some(0) => Ok(BodyLength::None),
            Some(n) => Ok(BodyLength::Exactly(n)),
        };
    };
    if version == Version::HTTP_10 {
        return Err(HeadError::Framing(
            "Transfer-Encoding in an HTTP/1.0 request",
        ));
    }
    if !matches!(content_length, Ok(None)) {
        return Err(HeadError::Framing(
            "both Transfer-Encoding and Content-Length",
        ));
    }
    match codings {
        [.., last] if last.eq_ignore_ascii_case(b"chunked") => {}
        _ => {
            return Err(HeadError::Framing(
                "chunked is not the final transfer coding",
            ));
        }
    }
    // RFC 9112 §6.1: chunked is applied once, and last.
    if codings[..codings.len() - 1]
        .iter()
        .any(|c| c.eq_ignore_ascii_case(b"chunked"))
    {
        return Err(HeadError::Framing("chunked applied more than once"));
    }
    if codings.len() > 1 {
        let listed = codings.join(&b", "[..]);
        return Err(HeadError::Coding(
            String::from_utf8_lossy(&listed).into_owned(),
        ));
    }
    Ok(BodyLength::Chunked)
}

/// A request as the server reads it from `bytes`, followed by the client's close: its head,
/// then its body through the same framing: for the fuzz targets and the tests against hyper.
#[cfg(any(test, fuzzing, feature = "testing"))]
pub(crate) enum ReadRequest<R> {
    /// The head and the body, `Err` when the body's framing is broken or it is cut short.
    Request(R, Result<Vec<u8>, String>),
    /// The head is not complete.
    Partial,
    Refused(HeadError),
}

#[cfg(any(test, fuzzing, feature = "testing"))]
pub(crate) fn read_for_fuzzing<R: FromParts>(bytes: &[u8]) -> ReadRequest<R> {
    use super::framing::{Chunk, Framing, decode};
    let mut read = BytesMut::from(bytes);
    let arriving = match parse_request(&mut read, 64 * 1024) {
        Parsed::Request(arriving) => arriving,
        Parsed::Partial => return ReadRequest::Partial,
        Parsed::Refused(error) => return ReadRequest::Refused(error),
    };
    let mut framing = match arriving.body {
        BodyLength::None => Framing::Done,
        BodyLength::Exactly(n) => Framing::Length(n),
        BodyLength::Chunked => Framing::Chunked(Chunk::Size),
    };
    let mut body = Vec::new();
    let outcome = loop {
        match decode(&mut framing, &mut read) {
            Ok(Some(frame)) => {
                if let Some(data) = frame.data_ref() {
                    body.extend_from_slice(data);
                }
            }
            Ok(None) if framing == Framing::Done => break Ok(body),
            Ok(None) => break Err("the body is cut short".to_owned()),
            Err(error) => break Err(error.to_string()),
        }
    };
    ReadRequest::Request(arriving.request, outcome)
}

#[cfg(test)]
mod tests;
