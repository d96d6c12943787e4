//! The canonical form of a request path (RFC 3986 §6.2.2): percent-encodings of unreserved
//! characters decoded (§2.3, §6.2.2.2) and the others' hex digits upper-case (§6.2.2.1), bytes
//! that may not stand in a path percent-encoded, repeated slashes merged, then dot segments
//! removed (§5.2.4). Routes are matched on this form and it is what the upstream receives, so a
//! path spelled `//login`, `/./login`, `/%6cogin` or `/x/../login` is counted as `/login`.
//!
//! Pure and allocation-free for a path that is already canonical: most are.

use std::borrow::Cow;
use std::fmt;

/// What to do with `%2F` and `%5C`, which some upstreams decode into `/` and `\` before they
/// route (Envoy's `path_with_escaped_slashes_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EscapedSlashes {
    /// Leave them encoded: a segment that contains one stays one segment.
    #[default]
    Keep,
    /// Refuse the request (400).
    Reject,
}

/// Why a path has no canonical form; each is a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// Not origin-form: it must start with `/` (RFC 9112 §3.2.1).
    NotOriginForm,
    /// A `%` not followed by two hex digits (RFC 3986 §2.1).
    InvalidPercentEncoding,
    /// `%00`: a NUL ends strings in many upstreams, which then see a shorter path.
    Nul,
    /// A raw `\`: not allowed in a URI (RFC 3986 §3.3), and a `/` to some servers.
    Backslash,
    /// `%2F` or `%5C` with `escaped_slashes = "reject"`.
    EscapedSlash,
    /// A dot segment with parameters (`..;x`), which Java servlet containers read as `..`.
    DotSegmentWithParameters,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::NotOriginForm => "the request target must be a path starting with \"/\"",
            PathError::InvalidPercentEncoding => {
                "the path has a \"%\" that is not followed by two hex digits"
            }
            PathError::Nul => "the path has an encoded NUL (%00)",
            PathError::Backslash => "the path has a backslash, which a URI may not contain",
            PathError::EscapedSlash => "the path has an encoded slash (%2F or %5C)",
            PathError::DotSegmentWithParameters => "the path has a dot segment with parameters",
        })
    }
}

/// How a path byte is treated by the check for a canonical path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// May stand as it is: unreserved, sub-delims, `:` and `@` (RFC 3986 §3.3 pchar).
    Plain,
    Slash,
    Dot,
    Percent,
    Semicolon,
    /// Must be percent-encoded (or refused, for `\`).
    Other,
}

const fn class_of(byte: u8) -> Class {
    match byte {
        b'/' => Class::Slash,
        b'.' => Class::Dot,
        b'%' => Class::Percent,
        b';' => Class::Semicolon,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'~' => Class::Plain,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b'=' | b':' | b'@' => {
            Class::Plain
        }
        _ => Class::Other,
    }
}

const CLASSES: [Class; 256] = {
    let mut table = [Class::Other; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = class_of(byte as u8);
        byte += 1;
    }
    table
};

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// The canonical form of `path`: `Ok(None)` when it is canonical already (no allocation).
pub fn normalize(path: &str, slashes: EscapedSlashes) -> Result<Option<String>, PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotOriginForm);
    }
    if is_canonical(path.as_bytes()) {
        return Ok(None);
    }
    let decoded = decode_unreserved(path.as_bytes(), slashes)?;
    let canonical = remove_dot_segments(&decoded)?;
    // A path with encodings that stay is canonical too, and kept as it came.
    Ok((canonical != path).then_some(canonical))
}

/// True when `path` (starting with `/`) has nothing to decode, encode, merge or remove: only
/// plain bytes, single slashes and segments other than `.` and `..`, and no `;` right after a
/// segment of dots.
fn is_canonical(path: &[u8]) -> bool {
    // Dots since the segment began (None once the segment has anything else).
    let mut dots = Some(0u8);
    for &byte in &path[1..] {
        match CLASSES[byte as usize] {
            Class::Plain => dots = None,
            Class::Dot => dots = dots.map(|d| d.saturating_add(1)),
            Class::Slash => {
                if matches!(dots, Some(0..=2)) {
                    return false; // `//`, `/./` or `/../`
                }
                dots = Some(0);
            }
            Class::Semicolon => {
                if dots.is_some() {
                    return false; // `..;x`, `.;x` (and `/;x`, checked on the slow path)
                }
            }
            Class::Percent | Class::Other => return false,
        }
    }
    !matches!(dots, Some(1..=2)) // a final `.` or `..`
}

/// `path` with unreserved characters decoded, other encodings upper-cased, and bytes that are
/// not pchar or `/` encoded. `\` and invalid or NUL encodings are refused.
fn decode_unreserved(path: &[u8], slashes: EscapedSlashes) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(path.len() + 8);
    let mut rest = path;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        match byte {
            b'%' => {
                let value = match tail {
                    [high, low, ..] => hex_value(*high)
                        .zip(hex_value(*low))
                        .map(|(h, l)| h << 4 | l),
                    _ => None,
                }
                .ok_or(PathError::InvalidPercentEncoding)?;
                rest = &tail[2..];
                let reject = slashes == EscapedSlashes::Reject;
                match value {
                    0 => return Err(PathError::Nul),
                    b'/' | b'\\' if reject => return Err(PathError::EscapedSlash),
                    value if is_unreserved(value) => out.push(value),
                    value => push_encoded(&mut out, value),
                }
            }
            b'\\' => return Err(PathError::Backslash),
            // HTTP parsers refuse a raw NUL; refused here too, as its encoding is.
            0 => return Err(PathError::Nul),
            byte if CLASSES[byte as usize] == Class::Other => push_encoded(&mut out, byte),
            byte => out.push(byte),
        }
    }
    // `%252F` (also as `%25%32F`, once decoded): a slash to an upstream that decodes twice.
    let twice = |window: &[u8]| window.starts_with(b"%25") && encodes_a_slash(&window[3..]);
    if slashes == EscapedSlashes::Reject && out.windows(5).any(twice) {
        return Err(PathError::EscapedSlash);
    }
    Ok(out)
}

/// Whether `text` starts with `2F` or `5C`, in any case.
fn encodes_a_slash(text: &[u8]) -> bool {
    matches!(text.get(..2), Some(hex) if hex.eq_ignore_ascii_case(b"2f") || hex.eq_ignore_ascii_case(b"5c"))
}

fn hex_value(digit: u8) -> Option<u8> {
    (digit as char).to_digit(16).map(|value| value as u8)
}

fn push_encoded(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(&[
        b'%',
        HEX[usize::from(byte >> 4)],
        HEX[usize::from(byte & 0xf)],
    ]);
}

/// Merges repeated slashes, then removes `.` and `..` segments (RFC 3986 §5.2.4) of a decoded
/// path that starts with `/`. A path ending in a dot segment keeps its trailing slash (`/a/..`
/// is `/`, `/a/b/.` is `/a/b/`), as §5.2.4 has it.
fn remove_dot_segments(path: &[u8]) -> Result<String, PathError> {
    let mut segments: Vec<&[u8]> = Vec::new();
    let mut trailing_slash = false;
    for segment in path[1..].split(|&b| b == b'/') {
        trailing_slash = true;
        match segment {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            _ if is_dot_with_parameters(segment) => {
                return Err(PathError::DotSegmentWithParameters);
            }
            _ => {
                segments.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut out = Vec::with_capacity(path.len());
    for segment in &segments {
        out.push(b'/');
        out.extend_from_slice(segment);
    }
    if trailing_slash || out.is_empty() {
        out.push(b'/');
    }
    // Only ASCII was pushed: every other byte was percent-encoded.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A canonical `path` as routes match it and `path` keys count it: each segment's parameters
/// (`;x`) removed, as Java servlet containers remove them before they route, and segments
/// left empty merged, so `/;x/login` and `/login;jsessionid=1` are `/login`. The upstream
/// still receives the path with its parameters. Borrowed when there is no `;`.
pub fn without_parameters(path: &str) -> Cow<'_, str> {
    if !path.contains(';') {
        return Cow::Borrowed(path);
    }
    let segments: Vec<&str> = (path[1..].split('/'))
        .map(|segment| segment.split(';').next().unwrap_or_default())
        .collect();
    let mut matched = String::with_capacity(path.len());
    for segment in segments.iter().filter(|segment| !segment.is_empty()) {
        matched.push('/');
        matched.push_str(segment);
    }
    if matched.is_empty() || segments.last().is_some_and(|last| last.is_empty()) {
        matched.push('/');
    }
    Cow::Owned(matched)
}

/// `.;x` or `..;x`: a segment of one or two dots followed by parameters.
fn is_dot_with_parameters(segment: &[u8]) -> bool {
    let before = segment.split(|&b| b == b';').next().unwrap_or_default();
    segment.len() > before.len() && matches!(before, b"." | b"..")
}

#[cfg(test)]
#[path = "path_tests.rs"]
mod tests;
