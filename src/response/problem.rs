//! The problem+json document (RFC 9457) of every answer the gateway generates, written straight
//! into its body.

use bytes::Bytes;
use http::{Response, StatusCode};

use super::ResponseBody;
use crate::request::id::RequestId;
use Detail::{Json, Text};

/// A piece of a problem's detail.
pub(super) enum Detail<'a> {
    /// The gateway's own words, and numbers: already the inside of a JSON string, copied as
    /// they are (escaping them again cost every denial; docs/PERFORMANCE.md, "Measured behind
    /// the code").
    Json(&'a str),
    /// Text from elsewhere (names from the config, an error's words): escaped.
    Text(&'a str),
}

/// A problem+json answer with the given status, type and detail, which is the text of
/// `detail`'s pieces one after the other, written straight into the body (a `format!` of the
/// detail and a second pass to escape it cost every denial; docs/PERFORMANCE.md, "Measured
/// behind the code").
pub(super) fn problem_response(
    status: StatusCode,
    problem_type: &str,
    detail: &[Detail<'_>],
    request_id: &RequestId,
) -> Response<ResponseBody> {
    let mut body = Vec::with_capacity(256);
    body.extend_from_slice(b"{\"type\":");
    push_json_string(&mut body, problem_type);
    body.extend_from_slice(b",\"title\":\"");
    // The standard reasons are plain words.
    let title = status.canonical_reason().unwrap_or("Error");
    debug_assert_eq!(first_to_escape(title.as_bytes()), None, "{title}");
    body.extend_from_slice(title.as_bytes());
    body.extend_from_slice(b"\",\"status\":");
    body.extend_from_slice(itoa::Buffer::new().format(status.as_u16()).as_bytes());
    body.extend_from_slice(b",\"detail\":\"");
    for piece in detail {
        match piece {
            Json(json) => body.extend_from_slice(json.as_bytes()),
            Text(text) => push_json_content(&mut body, text),
        }
    }
    body.push(b'"');
    body.extend_from_slice(b",\"request_id\":");
    push_json_string(&mut body, request_id.as_str());
    body.push(b'}');
    let mut response = Response::new(ResponseBody::problem(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// `text` as a JSON string. Written by hand: serde_json's general escaper was the largest
/// single cost of a denial. Runs of plain bytes are found eight at a time and copied at once.
pub(super) fn push_json_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    push_json_content(out, text);
    out.push(b'"');
}

/// `text` escaped for the inside of a JSON string.
pub(super) fn push_json_content(out: &mut Vec<u8>, text: &str) {
    let mut rest = text.as_bytes();
    while let Some(at) = first_to_escape(rest) {
        out.extend_from_slice(&rest[..at]);
        match rest[at] {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            control => out.extend_from_slice(format!("\\u{control:04x}").as_bytes()),
        }
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
}

/// Where the first byte JSON needs escaped is, eight bytes at a time: a problem's pieces are
/// short, and a byte at a time (past the last whole block) this cost a denial a large share
/// of its instructions (docs/PERFORMANCE.md, "Measured behind the code").
pub(super) fn first_to_escape(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < 8 {
        return bytes.iter().position(|&byte| needs_escape(byte));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
    // Whole words, then the last eight bytes: they overlap bytes found plain, which a borrow
    // cannot flag, so the lowest flag is still the first byte to escape.
    let last = bytes.len() - 8;
    let mut at = 0;
    loop {
        let start = at.min(last);
        let flags = escape_flags(word(start));
        if flags != 0 {
            return Some(start + flags.trailing_zeros() as usize / 8);
        }
        if start == last {
            return None;
        }
        at += 8;
    }
}

/// The top bit of each byte of `word` (read little-endian) that JSON needs escaped, and
/// perhaps of bytes above such a byte (a borrow), never below: the lowest is exact.
fn escape_flags(word: u64) -> u64 {
    const EACH: u64 = 0x0101_0101_0101_0101;
    const TOP: u64 = EACH * 0x80;
    // A byte's top bit is set after the subtraction, and clear before it, only when the byte
    // was below `n` (for `n` up to 0x80), or when a byte below it was.
    let below = |word: u64, n: u8| word.wrapping_sub(EACH * u64::from(n)) & !word & TOP;
    let equal = |byte: u8| below(word ^ (EACH * u64::from(byte)), 1);
    below(word, 0x20) | equal(b'"') | equal(b'\\')
}

/// What JSON allows in a string only escaped.
pub(super) fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}
