//! The canonical form of a Host field or an authority (RFC 9112 §3.2, RFC 3986 §3.2.2): a
//! lower-case DNS name without its trailing dot, an IPv4 address, or an IPv6 literal in RFC 5952
//! form, then an optional port without leading zeros. Routes and `host` keys read the name;
//! the upstream receives name and port.
//!
//! Stricter than RFC 3986's reg-name, as nginx's `ngx_http_validate_host` is: only letters,
//! digits, `-`, `.` and `_` (no DNS name needs sub-delims or percent-encoding, and `a, b` is two
//! Host values folded into one), no empty label, at most 255 bytes.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv6Addr;

/// Longest host name accepted (DNS allows 253, plus a trailing dot).
const MAX_NAME: usize = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostError {
    Empty,
    /// Not a DNS name, an IPv4 address or a bracketed IPv6 address, with an optional port.
    Invalid,
    /// `user@host`: deprecated (RFC 9110 §4.2.4) and never what a gateway should route by.
    UserInfo,
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostError::Empty => "the host is empty",
            HostError::Invalid => {
                "the host is not a valid host name or address with an optional port"
            }
            HostError::UserInfo => "the authority carries user information",
        })
    }
}

/// A host in canonical form: `name[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalHost<'a> {
    pub text: Cow<'a, [u8]>,
    /// The name's length: `text[..name_len]` is the host without its port.
    pub name_len: usize,
}

/// The canonical form of `raw`, borrowed when `raw` is canonical already.
pub fn canonical(raw: &[u8]) -> Result<CanonicalHost<'_>, HostError> {
    match canonical_as_it_is(raw) {
        Some(name_len) => Ok(CanonicalHost {
            text: Cow::Borrowed(raw),
            name_len,
        }),
        None => checked_in_full(raw),
    }
}

/// The canonical form of `raw`, each part checked and rebuilt when it needs to be.
fn checked_in_full(raw: &[u8]) -> Result<CanonicalHost<'_>, HostError> {
    if raw.is_empty() {
        return Err(HostError::Empty);
    }
    if raw.contains(&b'@') {
        return Err(HostError::UserInfo);
    }
    let (name, port) = split_port(raw)?;
    let name = canonical_name(name)?;
    let port = canonical_port(port)?;
    let name_len = name.len();
    let unchanged = matches!(name, Cow::Borrowed(n) if n.len() == raw.len()
        || port.is_some_and(|p| n.len() + 1 + p.len() == raw.len()));
    if unchanged {
        return Ok(CanonicalHost {
            text: Cow::Borrowed(raw),
            name_len,
        });
    }
    let mut text = name.into_owned();
    if let Some(port) = port {
        text.push(b':');
        text.extend_from_slice(port);
    }
    Ok(CanonicalHost {
        text: Cow::Owned(text),
        name_len,
    })
}

/// The name's length when `raw` is canonical already: a lower-case name of letters, digits,
/// `-`, `_` and single dots, neither starting nor ending with one, and an optional port without
/// a leading zero. One pass, for the Host nearly every request carries (the checks below make
/// several passes over it).
fn canonical_as_it_is(raw: &[u8]) -> Option<usize> {
    // A name may not start with a dot: as if one came before it.
    let mut previous = b'.';
    let mut name_len = raw.len();
    for (i, &byte) in raw.iter().enumerate() {
        if !NAME_BYTES[usize::from(byte)] {
            match byte {
                b'.' if previous != b'.' => {}
                b':' => {
                    name_len = i;
                    break;
                }
                _ => return None,
            }
        }
        previous = byte;
    }
    if name_len == 0 || name_len > MAX_NAME || previous == b'.' {
        return None;
    }
    match raw.get(name_len + 1..) {
        None => Some(name_len),
        Some([first, rest @ ..]) if *first != b'0' && rest.len() < 5 => {
            let port = raw[name_len + 1..].iter().try_fold(0u32, |port, &digit| {
                digit
                    .is_ascii_digit()
                    .then(|| port * 10 + u32::from(digit - b'0'))
            })?;
            (port <= 65535).then_some(name_len)
        }
        Some(_) => None,
    }
}

/// For the fuzz target: the one-pass check takes nothing the full check would change.
#[cfg(any(test, fuzzing, feature = "testing"))]
#[expect(
    clippy::expect_used,
    reason = "a fuzz target's oracle: a panic is the finding"
)]
pub fn check_the_fast_path(raw: &[u8]) {
    if let Some(name_len) = canonical_as_it_is(raw) {
        let full = checked_in_full(raw).expect("a host taken as it is is valid");
        assert_eq!((full.text.as_ref(), full.name_len), (raw, name_len));
    }
}

/// The bytes a canonical name has besides dots: lower-case letters, digits, `-` and `_`.
const NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_';
        byte += 1;
    }
    table
};

/// The name and the port's digits (None without a port).
fn split_port(raw: &[u8]) -> Result<(&[u8], Option<&[u8]>), HostError> {
    let name_end = if raw.starts_with(b"[") {
        raw.iter()
            .position(|&b| b == b']')
            .ok_or(HostError::Invalid)?
            + 1
    } else {
        raw.iter().position(|&b| b == b':').unwrap_or(raw.len())
    };
    let (name, rest) = raw.split_at(name_end);
    match rest {
        [] => Ok((name, None)),
        [b':', port @ ..] => Ok((name, Some(port))),
        _ => Err(HostError::Invalid),
    }
}

fn canonical_name(name: &[u8]) -> Result<Cow<'_, [u8]>, HostError> {
    if let Some(literal) = name.strip_prefix(b"[") {
        return ipv6_literal(literal.strip_suffix(b"]").ok_or(HostError::Invalid)?);
    }
    let trimmed = name.strip_suffix(b".").unwrap_or(name);
    let valid_byte = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    let valid = !trimmed.is_empty()
        && trimmed.len() <= MAX_NAME
        && trimmed.iter().all(valid_byte)
        && !trimmed.starts_with(b".")
        && !trimmed.ends_with(b".")
        && !trimmed.windows(2).any(|pair| pair == b"..");
    if !valid {
        return Err(HostError::Invalid);
    }
    if trimmed.len() == name.len() && !trimmed.iter().any(u8::is_ascii_uppercase) {
        return Ok(Cow::Borrowed(name));
    }
    Ok(Cow::Owned(trimmed.to_ascii_lowercase()))
}

/// `[addr]` in RFC 5952 form; IPvFuture and zone identifiers are refused.
fn ipv6_literal(inside: &[u8]) -> Result<Cow<'_, [u8]>, HostError> {
    let text = std::str::from_utf8(inside).map_err(|_| HostError::Invalid)?;
    let address: Ipv6Addr = text.parse().map_err(|_| HostError::Invalid)?;
    // Rare enough to be formatted every time.
    Ok(Cow::Owned(format!("[{address}]").into_bytes()))
}

/// Digits without leading zeros, at most 65535; an empty port (`host:`) is no port.
fn canonical_port(port: Option<&[u8]>) -> Result<Option<&[u8]>, HostError> {
    let Some(port) = port.filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    if port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return Err(HostError::Invalid);
    }
    let value: u32 = std::str::from_utf8(port)
        .ok()
        .and_then(|p| p.parse().ok())
        .ok_or(HostError::Invalid)?;
    if value > 65535 {
        return Err(HostError::Invalid);
    }
    let first_digit = port
        .iter()
        .position(|&b| b != b'0')
        .unwrap_or(port.len() - 1);
    Ok(Some(&port[first_digit..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(raw: &str) -> Result<(String, usize), HostError> {
        let host = canonical(raw.as_bytes())?;
        Ok((
            String::from_utf8(host.text.into_owned()).unwrap(),
            host.name_len,
        ))
    }

    #[test]
    fn canonical_hosts_are_borrowed() {
        for raw in [
            "api.example.com",
            "api.example.com:8080",
            "127.0.0.1:80",
            "a_b-c",
        ] {
            let host = canonical(raw.as_bytes()).unwrap();
            assert!(matches!(host.text, Cow::Borrowed(_)), "{raw}");
            assert_eq!(host.text, raw.as_bytes());
        }
    }

    #[test]
    fn spellings_of_one_host_have_one_form() {
        for (raw, expected, name_len) in [
            ("API.Example.COM", "api.example.com", 15),
            ("api.example.com.", "api.example.com", 15),
            ("API.example.com.:0443", "api.example.com:443", 15),
            ("api.example.com:", "api.example.com", 15),
            ("api:00080", "api:80", 3),
            ("api:0", "api:0", 3),
            ("[::1]", "[::1]", 5),
            ("[0:0::1]:8080", "[::1]:8080", 5),
            ("[2001:DB8::A]", "[2001:db8::a]", 13),
        ] {
            assert_eq!(text(raw), Ok((expected.to_string(), name_len)), "{raw}");
        }
    }

    /// The one-pass check agrees with the full one: whatever it takes as canonical, the full
    /// check leaves as it is.
    #[test]
    fn the_fast_check_takes_only_what_is_canonical() {
        let samples = [
            "a", "a.b", "a.b.", ".a", "a..b", "A", "a:80", "a:080", "a:0", "a:", "a:65535",
            "a:65536", "a:123456", "a:8x", "[::1]", "a_b-c.d9", "a b", "a,b", ":80", "",
        ];
        for raw in samples {
            if let Some(name_len) = canonical_as_it_is(raw.as_bytes()) {
                let full = checked_in_full(raw.as_bytes()).unwrap();
                assert_eq!((&full.text[..], full.name_len), (raw.as_bytes(), name_len));
            }
        }
    }

    #[test]
    fn malformed_hosts_are_refused() {
        assert_eq!(text(""), Err(HostError::Empty));
        assert_eq!(text("user@api.example.com"), Err(HostError::UserInfo));
        for raw in [
            "a, b",
            "a,b",
            "a b",
            ".",
            ".api",
            "api..example",
            "api.example..",
            "api.example..:80",
            "api/x",
            "api\\x",
            "api%2ex",
            "::1",
            "[::1",
            "[v1.x]",
            "[::1]x",
            "[fe80::1%25eth0]",
            "api:80:80",
            "api:x",
            "api:65536",
            "api:123456",
            ":80",
            "api:-1",
        ] {
            assert_eq!(text(raw), Err(HostError::Invalid), "{raw:?}");
        }
        assert_eq!(text(&"a".repeat(256)), Err(HostError::Invalid));
        assert!(text(&"a".repeat(255)).is_ok());
    }
}
