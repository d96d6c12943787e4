//! Message bodies as they stream in, framed by Content-Length, chunked coding (extensions and
//! trailers, RFC 9112 §7.1) or the sender's close (RFC 9112 §6.3): each piece becomes a frame
//! as soon as it is buffered. One decoder for both directions: the server reads request bodies
//! with it, the upstream client response bodies.

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::Frame;

/// Longest trailer section accepted.
pub(crate) const MAX_TRAILER_BYTES: usize = 64 * 1024;

/// Longest chunk-size line, extensions included.
const MAX_CHUNK_LINE: usize = 4096;

/// Why a body's framing is broken; the connection it came on cannot be read any further.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FramingError {
    #[error("{0}")]
    Framing(&'static str),
    #[error("trailer section larger than {MAX_TRAILER_BYTES} bytes")]
    TrailersTooLarge,
    #[error("malformed trailer section: {0}")]
    MalformedTrailers(httparse::Error),
}

/// How a body is delimited, and how much of it is left.
#[derive(Debug, PartialEq)]
pub(crate) enum Framing {
    Length(u64),
    Chunked(Chunk),
    /// Ends when the sender closes the connection, which is then not reused (responses only).
    UntilClose,
    /// A 101: the connection now carries another protocol.
    Upgraded,
    Done,
}

/// Where a chunked body's reader is.
#[derive(Debug, PartialEq)]
pub(crate) enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// Takes the next frame of a body off `buf`, if it holds one; `Ok(None)` when more bytes are
/// needed or the body has ended (`framing` is then `Done`).
pub(crate) fn decode(
    framing: &mut Framing,
    buf: &mut BytesMut,
) -> Result<Option<Frame<Bytes>>, FramingError> {
    loop {
        match framing {
            Framing::Done | Framing::Upgraded => return Ok(None),
            Framing::Length(left) => {
                let data = take_data(buf, left);
                if *left == 0 {
                    *framing = Framing::Done;
                }
                return Ok(data.map(Frame::data));
            }
            Framing::UntilClose => {
                return Ok((!buf.is_empty()).then(|| Frame::data(buf.split().freeze())));
            }
            Framing::Chunked(chunk) => match chunk {
                Chunk::Size => {
                    let Some(line_end) = find_line_end(buf, MAX_CHUNK_LINE)? else {
                        return Ok(None);
                    };
                    let size = chunk_size(&buf[..line_end])
                        .ok_or(FramingError::Framing("invalid chunk size line"))?;
                    buf.advance(line_end + 2);
                    *chunk = if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    };
                }
                Chunk::Data(left) => {
                    // Never empty: a zero size line starts the trailers instead.
                    let data = take_data(buf, left);
                    if *left == 0 {
                        *chunk = Chunk::DataEnd;
                    }
                    return Ok(data.map(Frame::data));
                }
                Chunk::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(None);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(FramingError::Framing("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    *chunk = Chunk::Size;
                }
                Chunk::Trailers => return decode_trailers(framing, buf),
            },
        }
    }
}

/// Up to `left` bytes of body from `buf`, `None` when it is empty.
fn take_data(buf: &mut BytesMut, left: &mut u64) -> Option<Bytes> {
    if buf.is_empty() || *left == 0 {
        return None;
    }
    let n = usize::try_from(*left).map_or(buf.len(), |left| left.min(buf.len()));
    *left -= n as u64;
    Some(buf.split_to(n).freeze())
}

/// The trailer section after the last chunk, up to its empty line.
fn decode_trailers(
    framing: &mut Framing,
    buf: &mut BytesMut,
) -> Result<Option<Frame<Bytes>>, FramingError> {
    if buf.starts_with(b"\r\n") {
        buf.advance(2);
        *framing = Framing::Done;
        return Ok(None);
    }
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let (length, trailers) = match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete((length, fields))) => {
            // Each trailer line ends in CRLF (RFC 9112 §7.1), as chunk lines do: httparse
            // takes a bare LF, and a section "ended" by one is not where hyper (which looks
            // for CRLF CRLF) or the upstream may end it.
            if has_bare_lf(&buf[..length]) {
                return Err(FramingError::Framing("bare LF in the trailer section"));
            }
            (length, header_map(fields))
        }
        Ok(httparse::Status::Partial) if buf.len() < MAX_TRAILER_BYTES => return Ok(None),
        Ok(httparse::Status::Partial) => return Err(FramingError::TrailersTooLarge),
        Err(error) => return Err(FramingError::MalformedTrailers(error)),
    };
    buf.advance(length);
    *framing = Framing::Done;
    Ok(Some(Frame::trailers(trailers)))
}

fn has_bare_lf(section: &[u8]) -> bool {
    (section.iter().enumerate()).any(|(at, &b)| b == b'\n' && (at == 0 || section[at - 1] != b'\r'))
}

/// Where the first line of `buf` ends (its CR of CRLF); an error if no line end comes within
/// `limit` bytes or a bare LF or CR comes first.
fn find_line_end(buf: &[u8], limit: usize) -> Result<Option<usize>, FramingError> {
    let window = &buf[..buf.len().min(limit)];
    match window.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(at) if window.get(at) == Some(&b'\n') => {
            Err(FramingError::Framing("bare LF in chunk line"))
        }
        Some(at) => match buf.get(at + 1) {
            Some(b'\n') => Ok(Some(at)),
            Some(_) => Err(FramingError::Framing("bare CR in chunk line")),
            None => Ok(None),
        },
        None if buf.len() >= limit => Err(FramingError::Framing("chunk line too long")),
        None => Ok(None),
    }
}

/// The size of a chunk line: hex digits, then optional extensions after `;`. RFC 9112 §7.1
/// puts no bound on the digits (`chunk-size = 1*HEXDIG`): any number of them whose value fits
/// a u64, leading zeros and all, as hyper reads them; the line's length is bounded instead.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return None;
    }
    let rest = line[digits..].trim_ascii_start();
    if !rest.is_empty() && rest[0] != b';' {
        return None;
    }
    line[..digits].iter().try_fold(0u64, |size, &b| {
        let digit = char::from(b).to_digit(16)?;
        size.checked_mul(16)?.checked_add(u64::from(digit))
    })
}

/// Parsed fields as a header map (httparse has checked names and values): a trailer
/// section, or a request head whose lines do not fit the gateway's own field container.
pub(crate) fn header_map(fields: &[httparse::Header<'_>]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(fields.len());
    for field in fields {
        let name = HeaderName::from_bytes(field.name.as_bytes());
        let value = HeaderValue::from_bytes(field.value);
        if let (Ok(name), Ok(value)) = (name, value) {
            map.append(name, value);
        }
    }
    map
}

/// Digits only (no sign, no spaces), as many as fit a u64: hyper reads the same values.
pub(crate) fn parse_decimal(text: &[u8]) -> Option<u64> {
    if text.is_empty() {
        return None;
    }
    text.iter().try_fold(0u64, |n, &b| {
        let digit = b.is_ascii_digit().then(|| u64::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// Adds the values of one Content-Length field to what earlier ones said: each a decimal,
/// all the same (RFC 9110 §8.6, RFC 9112 §6.3 item 5).
pub(crate) fn add_content_length(seen: &mut Result<Option<u64>, &'static str>, list: &[u8]) {
    for item in crate::http1::fields::list_items(list) {
        *seen = match (parse_decimal(item), *seen) {
            (_, Err(error)) => Err(error),
            (None, _) => Err("invalid Content-Length"),
            (Some(n), Ok(Some(before))) if n != before => Err("conflicting Content-Length values"),
            (Some(n), Ok(_)) => Ok(Some(n)),
        };
    }
}

#[cfg(test)]
mod tests;
