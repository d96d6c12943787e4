//! Writing HTTP/1 heads: field lines, chunk sizes, the request head a client sends upstream,
//! and the response head a server sends (`response.rs`).

use http::Method;
use http::uri::PathAndQuery;

use super::fields::{Role, role};

mod response;

use super::request_fields::RequestFields;
pub(crate) use response::{
    ResponseHeadFields, ResponseLength, encode_length, encode_response_head, response_length,
};

/// The fields a client sets on a request it sends, written around the request's own: Host
/// first, the rest after them. The request's own fields these replace are left out.
pub(crate) trait SenderFields {
    /// Writes the Host line, which goes first (RFC 9110 §7.2 recommends it), if any.
    fn encode_host(&self, buf: &mut Vec<u8>);
    /// True for a field of the request's own that is not written.
    fn leaves_out(&self, name: &[u8]) -> bool;
    /// Writes the other fields as head lines, after the request's own.
    fn encode(&self, buf: &mut Vec<u8>);
}

/// Writes the request line (origin-form `target`), the request's `fields` less those `set`
/// leaves out, then `set`'s. `length`: `None` for no body, `Some(None)` for a body of unknown
/// length (chunked), `Some(Some(n))` for `n` bytes.
pub(crate) fn encode_request_head(
    buf: &mut Vec<u8>,
    method: &Method,
    target: &PathAndQuery,
    fields: &RequestFields,
    set: &impl SenderFields,
    length: Option<Option<u64>>,
) {
    buf.extend_from_slice(method.as_str().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(target.as_str().as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    set.encode_host(buf);
    let framed_here = length.is_some();
    let framing = |name: &[u8]| matches!(role(name), Role::ContentLength | Role::TransferEncoding);
    fields.encode(buf, |name| {
        !(set.leaves_out(name) || framed_here && framing(name))
    });
    set.encode(buf);
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

/// A head line, `name: value\r\n`.
pub(crate) fn encode_field(buf: &mut Vec<u8>, name: impl AsRef<[u8]>, value: &[u8]) {
    let name = name.as_ref();
    buf.reserve(name.len() + value.len() + 4);
    buf.extend_from_slice(name);
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{CONTENT_LENGTH, HOST};
    use http::{HeaderMap, HeaderValue};

    /// A client that sets no fields of its own.
    struct NoneSet;

    impl SenderFields for NoneSet {
        fn encode_host(&self, _: &mut Vec<u8>) {}
        fn leaves_out(&self, _: &[u8]) -> bool {
            false
        }
        fn encode(&self, _: &mut Vec<u8>) {}
    }

    #[test]
    fn the_request_head_carries_the_framing_of_its_body() {
        let mut fields = HeaderMap::new();
        fields.insert(HOST, HeaderValue::from_static("api"));
        fields.insert(CONTENT_LENGTH, HeaderValue::from_static("999"));
        let head = |fields: &HeaderMap, length| {
            let mut buf = Vec::new();
            let target = PathAndQuery::from_static("/v1/orders?id=7");
            let fields = RequestFields::Map(fields.clone());
            encode_request_head(&mut buf, &Method::POST, &target, &fields, &NoneSet, length);
            String::from_utf8(buf).unwrap()
        };
        assert_eq!(
            head(&fields, Some(Some(3))),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ncontent-length: 3\r\n\r\n"
        );
        assert_eq!(
            head(&fields, Some(None)),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        fields.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        assert_eq!(
            head(&fields, None),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ncontent-length: 0\r\n\r\n"
        );
        let mut size = [0u8; 16];
        assert_eq!(hex(0, &mut size), b"0");
        assert_eq!(hex(0x1f40, &mut size), b"1f40");
    }
}
