//! A request line's version where httparse, which takes `HTTP/1.0` and `HTTP/1.1` only,
//! refused it: RFC 9112 §2.3 gives its syntax (`HTTP-version = HTTP-name "/" DIGIT "."
//! DIGIT`, `HTTP-name` case-sensitive), RFC 9110 §2.5 and §15.6.6 what a server does with a
//! version it does not implement.

/// What the version of a request line is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LineVersion {
    /// The line is not complete, and what has come may still be a version.
    Partial,
    /// `HTTP/1.<d>`, `d` above 1, the minor digit at this offset of the buffer: HTTP/1.x,
    /// served as HTTP/1.1, the highest minor version implemented (RFC 9110 §2.5).
    HigherMinor(usize),
    /// `HTTP/1.0` or `HTTP/1.1`, which httparse reads itself.
    Implemented,
    /// A well-formed version of a major version other than 1 (505, RFC 9110 §15.6.6).
    Unsupported,
    /// Not an `HTTP-version`: a malformed request line (400, RFC 9112 §3).
    Malformed,
}

/// `HTTP/`, a digit, `.`, a digit; `D` stands for a digit.
const SHAPE: &[u8; 8] = b"HTTP/D.D";

/// The version of the request line at the start of `read`, after its method and target as
/// httparse reads them (a token, one space, a target without spaces, one space).
pub(crate) fn line_version(read: &[u8]) -> LineVersion {
    // httparse skips empty lines before a request line (RFC 9112 §2.2).
    let line_start = read
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(read.len());
    let line = &read[line_start..];
    let Some(method_end) = line.iter().position(|&b| b == b' ') else {
        return LineVersion::Malformed;
    };
    let Some(target_end) = line[method_end + 1..].iter().position(|&b| b == b' ') else {
        return LineVersion::Malformed;
    };
    let start = line_start + method_end + 1 + target_end + 1;
    let rest = &read[start..];
    let (version, complete) = match rest.iter().position(|&b| b == b'\n') {
        Some(end) => (
            rest[..end].strip_suffix(b"\r").unwrap_or(&rest[..end]),
            true,
        ),
        None => (rest.strip_suffix(b"\r").unwrap_or(rest), false),
    };
    let fits = version.len() <= SHAPE.len()
        && (version.iter().zip(SHAPE)).all(|(&b, &shape)| match shape {
            b'D' => b.is_ascii_digit(),
            shape => b == shape,
        });
    match (fits, complete) {
        (false, _) => LineVersion::Malformed,
        (true, false) => LineVersion::Partial,
        (true, true) if version.len() < SHAPE.len() => LineVersion::Malformed,
        (true, true) if version[5] != b'1' => LineVersion::Unsupported,
        (true, true) if version[7] <= b'1' => LineVersion::Implemented,
        (true, true) => LineVersion::HigherMinor(start + 7),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_of_the_rfcs_shape_or_malformed() {
        let cases: &[(&str, LineVersion)] = &[
            ("GET / HTTP/1.2\r\n", LineVersion::HigherMinor(13)),
            ("\r\nGET / HTTP/1.9\n", LineVersion::HigherMinor(15)),
            ("GET / HTTP/2.0\r\n", LineVersion::Unsupported),
            ("GET / HTTP/3.0\r\n", LineVersion::Unsupported),
            ("GET / HTTP/0.9\r\n", LineVersion::Unsupported),
            ("GET / HTTP/1.1\r\n", LineVersion::Implemented),
            ("GET / HTTP/1.x\r\n", LineVersion::Malformed),
            ("GET / HTTP/1\r\n", LineVersion::Malformed),
            ("GET / HTTP/1.10\r\n", LineVersion::Malformed),
            ("GET / HTTP/2\r\n", LineVersion::Malformed),
            ("GET / HTTP/11.1\r\n", LineVersion::Malformed),
            ("GET / http/1.1\r\n", LineVersion::Malformed),
            ("GET / HTTP/1.1 \r\n", LineVersion::Malformed),
            ("GET /  HTTP/1.1\r\n", LineVersion::Malformed),
            ("GET /\r\n", LineVersion::Malformed),
            ("GET / \r\n", LineVersion::Malformed),
            ("GET / HTTP/2", LineVersion::Partial),
            ("GET / HTTP/2.0\r", LineVersion::Partial),
            ("GET / HTTP/2.0x", LineVersion::Malformed),
        ];
        for (line, expected) in cases {
            assert_eq!(&line_version(line.as_bytes()), expected, "{line:?}");
        }
    }
}
