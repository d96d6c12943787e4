//! Message heads: the request head the gateway writes, the response head it reads, and how that
//! response's body is delimited (RFC 9112 §6).

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, Version};
use smallvec::SmallVec;

use super::body::{Chunk, Framing};
use super::{ExchangeError, MAX_HEAD_BYTES, ResponseHead};
use crate::proxy::headers::{SetFields, connection_has};

/// Most fields in one response head.
const MAX_HEADERS: usize = 128;

/// The response head at the start of `buf`, split off it once complete.
pub(super) fn parse_head(
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<Option<ResponseHead>, ExchangeError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let length = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(length)) if length <= MAX_HEAD_BYTES => length,
        Ok(httparse::Status::Complete(_)) => return Err(ExchangeError::HeadTooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(ExchangeError::MalformedHead(error)),
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(ExchangeError::Framing("status code out of range"))?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    // Names now, values as slices of the head once it is split off the buffer (no copy).
    let base = buf.as_ptr() as usize;
    let mut names: SmallVec<[(HeaderName, Range<usize>); 24]> = SmallVec::new();
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| ExchangeError::Framing("invalid field name"))?;
        // httparse hands out slices of the buffer; anything else is refused, not trusted.
        let start = (field.value.as_ptr() as usize).wrapping_sub(base);
        let end = start
            .checked_add(field.value.len())
            .filter(|&end| end <= length)
            .ok_or(ExchangeError::Framing("field value outside the head"))?;
        names.push((name, start..end));
    }
    let head = buf.split_to(length).freeze();
    // Room for what the gateway adds (request id, rate-limit fields) without a regrow.
    let mut headers = HeaderMap::with_capacity(names.len() + 6);
    for (name, range) in names {
        let value = HeaderValue::from_maybe_shared(head.slice(range))
            .map_err(|_| ExchangeError::Framing("invalid field value"))?;
        headers.append(name, value);
    }
    let keep_alive = keeps_alive(version, &headers);
    let framing = response_framing(status, head_request, &mut headers)?;
    let keep_alive = keep_alive && !matches!(framing, Framing::UntilClose | Framing::Upgraded);
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = headers;
    Ok(Some(ResponseHead {
        response,
        framing,
        keep_alive,
    }))
}

/// Writes the request line, the request's fields less those `set` replaces, then `set`'s.
/// `length`: `None` for no body, `Some(None)` for a body of unknown length (chunked),
/// `Some(Some(n))` for `n` bytes.
pub(crate) fn encode_head(
    buf: &mut Vec<u8>,
    parts: &Parts,
    set: &SetFields,
    length: Option<Option<u64>>,
) {
    buf.extend_from_slice(parts.method.as_str().as_bytes());
    buf.push(b' ');
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    buf.extend_from_slice(target.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    let framed_here = length.is_some();
    for (name, value) in &parts.headers {
        if framed_here && (name == CONTENT_LENGTH || name == TRANSFER_ENCODING) {
            continue;
        }
        if SetFields::replaces(name) {
            continue;
        }
        encode_field(buf, name.as_str(), value.as_bytes());
    }
    for (name, value) in set.iter() {
        encode_field(buf, name.as_str(), value);
    }
    match length {
        Some(Some(n)) => {
            buf.extend_from_slice(b"content-length: ");
            buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        Some(None) => buf.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        None => {}
    }
    buf.extend_from_slice(b"\r\n");
}

pub(crate) fn encode_field(buf: &mut Vec<u8>, name: &str, value: &[u8]) {
    buf.reserve(name.len() + value.len() + 4);
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b": ");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

/// `n` in lowercase hexadecimal, written into `out`.
pub(crate) fn hex(mut n: usize, out: &mut [u8; 16]) -> &[u8] {
    let mut start = out.len();
    loop {
        start -= 1;
        out[start] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &out[start..];
        }
    }
}

/// HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when asked to keep it.
fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    if version == Version::HTTP_10 {
        connection_has(headers, "keep-alive")
    } else {
        !headers.contains_key(CONNECTION) || !connection_has(headers, "close")
    }
}

/// How the body of a response is delimited (RFC 9112 §6.3). A response with both
/// Transfer-Encoding and Content-Length loses the latter, as the client must not see both.
fn response_framing(
    status: StatusCode,
    head_request: bool,
    headers: &mut HeaderMap,
) -> Result<Framing, ExchangeError> {
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Framing::Upgraded);
    }
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Done);
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        headers.remove(CONTENT_LENGTH);
        let last_coding = headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .next_back()
            .and_then(|value| value.to_str().ok())
            .and_then(|list| list.rsplit(',').next())
            .map(str::trim);
        return Ok(match last_coding {
            Some(coding) if coding.eq_ignore_ascii_case("chunked") => Framing::Chunked(Chunk::Size),
            _ => Framing::UntilClose,
        });
    }
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        let text = value
            .to_str()
            .map_err(|_| ExchangeError::Framing("invalid Content-Length"))?;
        for item in text.split(',') {
            let n = parse_decimal(item.trim())
                .ok_or(ExchangeError::Framing("invalid Content-Length"))?;
            if length.is_some_and(|seen| seen != n) {
                return Err(ExchangeError::Framing("conflicting Content-Length values"));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => Framing::Done,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

/// Digits only (no sign, no spaces), at most 18 of them so the value cannot overflow.
fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use super::super::body::decode;

    /// Reads a whole response from `wire` as the connection would: head, then body frames.
    fn read_response(wire: &[u8], head_request: bool) -> Result<Option<Vec<u8>>, ExchangeError> {
        let mut buf = BytesMut::from(wire);
        let Some(head) = parse_head(&mut buf, head_request)? else {
            return Ok(None);
        };
        let mut framing = head.framing;
        let mut body = Vec::new();
        while let Some(frame) = decode(&mut framing, &mut buf)? {
            if let Ok(data) = frame.into_data() {
                body.extend_from_slice(&data);
            }
        }
        Ok(Some(body))
    }

    const VALID: &[u8] = b"HTTP/1.1 200 OK\r\nx-empty:\r\nx-list: a, b\r\n\
        transfer-encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\nx-sum: 1\r\n\r\n";

    proptest! {
        #[test]
        fn no_upstream_bytes_make_the_reader_panic(
            wire in prop::collection::vec(any::<u8>(), 0..600),
            head_request in any::<bool>(),
        ) {
            let _ = read_response(&wire, head_request);
        }

        #[test]
        fn no_damage_to_a_valid_response_makes_the_reader_panic(
            flips in prop::collection::vec((0..VALID.len(), any::<u8>()), 1..6),
            cut in 0..=VALID.len(),
        ) {
            let mut wire = VALID.to_vec();
            for (at, byte) in flips {
                wire[at] = byte;
            }
            wire.truncate(cut);
            let _ = read_response(&wire, false);
        }
    }

    #[test]
    fn a_valid_response_with_an_empty_field_reads_whole() {
        let mut buf = BytesMut::from(VALID);
        let head = parse_head(&mut buf, false).unwrap().unwrap();
        assert_eq!(head.response.headers()["x-empty"], "");
        assert_eq!(head.response.headers()["x-list"], "a, b");
        assert!(head.keep_alive);
        assert_eq!(read_response(VALID, false).unwrap().unwrap(), b"body");
        // A head split anywhere is simply not complete yet.
        for cut in 0..VALID.iter().position(|&b| b == b'4').unwrap() {
            assert!(
                parse_head(&mut BytesMut::from(&VALID[..cut]), false)
                    .unwrap()
                    .is_none()
            );
        }
    }

    fn framing_of(
        status: u16,
        head_request: bool,
        fields: &[(&str, &str)],
    ) -> Result<Framing, ExchangeError> {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        response_framing(
            StatusCode::from_u16(status).unwrap(),
            head_request,
            &mut headers,
        )
    }

    #[test]
    fn response_bodies_are_framed_as_rfc_9112_says() {
        let length = |n| Ok::<_, ExchangeError>(Framing::Length(n));
        assert_eq!(
            framing_of(200, false, &[("content-length", "5")]).ok(),
            length(5).ok()
        );
        assert_eq!(
            framing_of(200, false, &[("content-length", "5, 5")]).ok(),
            length(5).ok()
        );
        assert_eq!(
            framing_of(200, false, &[("content-length", "0")]).ok(),
            Some(Framing::Done)
        );
        assert_eq!(
            framing_of(200, true, &[("content-length", "5")]).ok(),
            Some(Framing::Done)
        );
        for status in [204, 304, 103] {
            assert_eq!(
                framing_of(status, false, &[("content-length", "5")]).ok(),
                Some(Framing::Done)
            );
        }
        assert_eq!(framing_of(101, false, &[]).ok(), Some(Framing::Upgraded));
        assert_eq!(framing_of(200, false, &[]).ok(), Some(Framing::UntilClose));
        assert_eq!(
            framing_of(
                200,
                false,
                &[
                    ("transfer-encoding", "gzip, chunked"),
                    ("content-length", "9")
                ]
            )
            .ok(),
            Some(Framing::Chunked(Chunk::Size))
        );
        // Chunked must come last; otherwise only the close ends the body.
        assert_eq!(
            framing_of(200, false, &[("transfer-encoding", "chunked, gzip")]).ok(),
            Some(Framing::UntilClose)
        );
        for bad in ["5, 6", "-5", "+5", "5 5", "0x5", "", "99999999999999999999"] {
            assert!(
                framing_of(200, false, &[("content-length", bad)]).is_err(),
                "{bad:?}"
            );
        }
        assert!(
            framing_of(
                200,
                false,
                &[("content-length", "5"), ("content-length", "6")]
            )
            .is_err()
        );
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_field() {
        let with = |connection: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(value) = connection {
                headers.insert(CONNECTION, HeaderValue::from_str(value).unwrap());
            }
            headers
        };
        assert!(keeps_alive(Version::HTTP_11, &with(None)));
        assert!(!keeps_alive(Version::HTTP_11, &with(Some("Close"))));
        assert!(!keeps_alive(
            Version::HTTP_11,
            &with(Some("x-trace, close"))
        ));
        assert!(!keeps_alive(Version::HTTP_10, &with(None)));
        assert!(keeps_alive(Version::HTTP_10, &with(Some("keep-alive"))));
    }

    #[test]
    fn the_request_head_carries_the_framing_of_its_body() {
        let (mut parts, ()) = http::Request::post("/v1/orders?id=7")
            .header("host", "api")
            .header("content-length", "999")
            .body(())
            .unwrap()
            .into_parts();
        let head = |parts: &Parts, length| {
            let mut buf = Vec::new();
            encode_head(&mut buf, parts, &SetFields::default(), length);
            String::from_utf8(buf).unwrap()
        };
        assert_eq!(
            head(&parts, Some(Some(3))),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ncontent-length: 3\r\n\r\n"
        );
        assert_eq!(
            head(&parts, Some(None)),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        assert_eq!(
            head(&parts, None),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ncontent-length: 0\r\n\r\n"
        );
        let mut size = [0u8; 16];
        assert_eq!(hex(0, &mut size), b"0");
        assert_eq!(hex(0x1f40, &mut size), b"1f40");
    }
}
