//! Limit keys: which parts of a request name the identity a limit counts against, and the
//! keyed 128-bit hash that identity is reduced to before it is stored, logged or exported, so
//! API keys never leave the process in clear and a huge header cannot make a huge key. The
//! hash depends only on the configured secret, so every instance of a fleet agrees on it.

use std::hash::Hasher;
use std::net::IpAddr;

use http::{HeaderName, Method};
use siphasher::sip128::{Hasher128, SipHasher13};

use crate::request_fields::{RequestFields, visible_text};

/// One part of a limit key, as written in `key = [...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyPart {
    Ip,
    Route,
    Method,
    Host,
    Path,
    Global,
    Header(HeaderName),
    Query(String),
    Cookie(String),
}

impl KeyPart {
    /// Parses `ip`, `route`, …, `header:x-api-key`, `query:key`, `cookie:session`.
    pub fn parse(text: &str) -> Result<KeyPart, String> {
        let expected = || {
            format!(
                "expected ip, route, method, host, path, global, header:NAME, query:NAME or cookie:NAME, got {text:?}"
            )
        };
        Ok(match text.split_once(':') {
            None => match text {
                "ip" => KeyPart::Ip,
                "route" => KeyPart::Route,
                "method" => KeyPart::Method,
                "host" => KeyPart::Host,
                "path" => KeyPart::Path,
                "global" => KeyPart::Global,
                _ => return Err(expected()),
            },
            Some(("header", name)) => {
                KeyPart::Header(HeaderName::from_bytes(name.as_bytes()).map_err(|_| expected())?)
            }
            Some(("query", name)) if !name.is_empty() => KeyPart::Query(name.to_string()),
            Some(("cookie", name)) if !name.is_empty() => KeyPart::Cookie(name.to_string()),
            _ => return Err(expected()),
        })
    }

    /// A short description for problem details (`header x-api-key`).
    pub fn describe(&self) -> String {
        match self {
            KeyPart::Header(name) => format!("header {name}"),
            KeyPart::Query(name) => format!("query parameter {name}"),
            KeyPart::Cookie(name) => format!("cookie {name}"),
            other => format!("{other:?}").to_lowercase(),
        }
    }

    fn tag(&self) -> u8 {
        match self {
            KeyPart::Ip => 1,
            KeyPart::Route => 2,
            KeyPart::Method => 3,
            KeyPart::Host => 4,
            KeyPart::Path => 5,
            KeyPart::Global => 6,
            KeyPart::Header(_) => 7,
            KeyPart::Query(_) => 8,
            KeyPart::Cookie(_) => 9,
        }
    }
}

/// What happens when a key part is absent from a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Use the client IP in its place.
    Ip,
    /// The limit does not apply to this request.
    Skip,
    /// The request is refused (401).
    Deny,
}

/// The facts of a request that keys are built from.
pub struct RequestFacts<'a> {
    /// Already grouped by the IPv6 prefix.
    pub client_ip: IpAddr,
    pub route: &'a str,
    pub method: &'a Method,
    pub host: Option<&'a [u8]>,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub fields: &'a RequestFields,
}

impl RequestFacts<'_> {
    /// The bytes of one key part, or None when the request lacks it.
    pub fn value(&self, part: &KeyPart) -> Option<PartValue<'_>> {
        Some(match part {
            KeyPart::Ip => PartValue::Ip(self.client_ip),
            KeyPart::Route => PartValue::Text(self.route.as_bytes()),
            KeyPart::Method => PartValue::Text(self.method.as_str().as_bytes()),
            KeyPart::Host => PartValue::Text(self.host?),
            KeyPart::Path => PartValue::Text(self.path.as_bytes()),
            KeyPart::Global => PartValue::Text(b""),
            KeyPart::Header(name) => PartValue::Text(self.fields.get(name)?),
            KeyPart::Query(name) => PartValue::Text(query_value(self.query?, name)?.as_bytes()),
            KeyPart::Cookie(name) => PartValue::Text(cookie_value(self.fields, name)?.as_bytes()),
        })
    }
}

pub enum PartValue<'a> {
    Ip(IpAddr),
    Text(&'a [u8]),
}

/// The first `name=value` in a query string (not percent-decoded: the raw value is the key).
fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name && !value.is_empty()).then_some(value)
    })
}

/// The first cookie called `name` across Cookie header lines.
fn cookie_value<'h>(fields: &'h RequestFields, name: &str) -> Option<&'h str> {
    fields
        .get_all(&http::header::COOKIE)
        .filter_map(visible_text)
        .find_map(|line| {
            line.split(';').find_map(|pair| {
                let (key, value) = pair.trim().split_once('=')?;
                (key == name && !value.is_empty()).then_some(value)
            })
        })
}

/// A 128-bit identity hash.
pub type Identity = u128;

/// Keyed SipHash-1-3 with 128-bit output. Without `hash_secret` the key is a fixed public
/// constant: still the same in every instance, but then low-entropy identities (IPs) can be
/// recovered from the hashes by whoever sees them, so set a secret.
#[derive(Clone)]
pub struct IdentityHasher {
    key: [u8; 16],
}

impl IdentityHasher {
    pub fn new(secret: Option<&str>) -> IdentityHasher {
        let mut derive = SipHasher13::new_with_key(b"ratelimit-proxy!");
        derive.write(secret.unwrap_or_default().as_bytes());
        IdentityHasher {
            key: derive.finish128().as_bytes(),
        }
    }

    /// Starts an identity for limit `limit` (and the caller's tier).
    pub fn start(&self, limit: &str, tier: &str) -> IdentityBuilder {
        let mut hasher = SipHasher13::new_with_key(&self.key);
        write_field(&mut hasher, 0, limit.as_bytes());
        write_field(&mut hasher, 0, tier.as_bytes());
        IdentityBuilder { hasher }
    }
}

#[derive(Clone)]
pub struct IdentityBuilder {
    hasher: SipHasher13,
}

impl IdentityBuilder {
    /// Adds what the state of a limit means (its algorithm and windows), so a limit whose
    /// rates change gets fresh state instead of reinterpreting the old (e.g. across reloads).
    pub fn add_policy(&mut self, algorithm: &str, rates: impl Iterator<Item = (u64, u64, u64)>) {
        write_field(&mut self.hasher, 0xfe, algorithm.as_bytes());
        for (limit, per_ns, burst) in rates {
            self.hasher.write_u64(limit);
            self.hasher.write_u64(per_ns);
            self.hasher.write_u64(burst);
        }
    }

    /// Adds one key part; `fallback` marks the client IP standing in for a missing part, so it
    /// never collides with a real value.
    pub fn add(&mut self, part: &KeyPart, value: &PartValue<'_>, fallback: bool) {
        let tag = part.tag() | if fallback { 0x80 } else { 0 };
        match value {
            PartValue::Ip(IpAddr::V4(ip)) => write_field(&mut self.hasher, tag, &ip.octets()),
            PartValue::Ip(IpAddr::V6(ip)) => write_field(&mut self.hasher, tag, &ip.octets()),
            PartValue::Text(bytes) => write_field(&mut self.hasher, tag, bytes),
        }
    }

    /// The identity of this limit's key.
    pub fn finish(self) -> Identity {
        self.hasher.finish128().as_u128()
    }
}

/// The identity of window `window` of a limit: a bijection of the limit's identity, so windows
/// never collide, at no extra hashing per window.
pub fn window_identity(identity: Identity, window: usize) -> Identity {
    const SPREAD: u128 = 0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C834;
    identity ^ SPREAD.wrapping_mul(window as u128)
}

/// Length-prefixed so that ("ab", "c") and ("a", "bc") differ.
fn write_field(hasher: &mut SipHasher13, tag: u8, bytes: &[u8]) {
    hasher.write_u8(tag);
    hasher.write_u64(bytes.len() as u64);
    hasher.write(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(fields: &'a RequestFields, query: Option<&'a str>) -> RequestFacts<'a> {
        RequestFacts {
            client_ip: "198.51.100.7".parse().unwrap(),
            route: "search",
            method: &Method::GET,
            host: Some(b"api.example.com"),
            path: "/v1/search",
            query,
            fields,
        }
    }

    fn text(value: Option<PartValue<'_>>) -> Option<String> {
        match value? {
            PartValue::Text(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            PartValue::Ip(ip) => Some(ip.to_string()),
        }
    }

    #[test]
    fn parses_every_part_and_rejects_others() {
        assert_eq!(KeyPart::parse("ip"), Ok(KeyPart::Ip));
        assert_eq!(
            KeyPart::parse("header:X-Api-Key"),
            Ok(KeyPart::Header(HeaderName::from_static("x-api-key")))
        );
        assert_eq!(
            KeyPart::parse("query:key"),
            Ok(KeyPart::Query("key".into()))
        );
        assert_eq!(
            KeyPart::parse("cookie:session"),
            Ok(KeyPart::Cookie("session".into()))
        );
        for bad in ["", "ips", "header:", "header:bad name", "query:", "body:x"] {
            assert!(KeyPart::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn extracts_headers_queries_and_cookies() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-api-key", "k-123".parse().unwrap());
        headers.append("cookie", "a=1; session=s-9".parse().unwrap());
        let lines = crate::request_fields::tests::lines_like(&headers);
        for fields in [RequestFields::Map(headers), lines] {
            extracts_from(&fields);
        }
    }

    fn extracts_from(fields: &RequestFields) {
        let f = facts(fields, Some("q=rust&key=abc&empty="));
        assert_eq!(
            text(f.value(&KeyPart::parse("header:x-api-key").unwrap())),
            Some("k-123".into())
        );
        assert_eq!(
            text(f.value(&KeyPart::Query("key".into()))),
            Some("abc".into())
        );
        assert_eq!(text(f.value(&KeyPart::Query("empty".into()))), None);
        assert_eq!(text(f.value(&KeyPart::Query("nope".into()))), None);
        assert_eq!(
            text(f.value(&KeyPart::Cookie("session".into()))),
            Some("s-9".into())
        );
        assert_eq!(text(f.value(&KeyPart::Cookie("sess".into()))), None);
        assert_eq!(text(f.value(&KeyPart::Ip)), Some("198.51.100.7".into()));
        assert_eq!(
            text(f.value(&KeyPart::Header(HeaderName::from_static("x-other")))),
            None
        );
    }

    #[test]
    fn identities_depend_on_secret_limit_tier_parts_and_window() {
        let ip = PartValue::Ip("198.51.100.7".parse().unwrap());
        let identity =
            |secret: Option<&str>, limit: &str, tier: &str, window: usize, fallback: bool| {
                let mut builder = IdentityHasher::new(secret).start(limit, tier);
                builder.add(&KeyPart::Ip, &ip, fallback);
                window_identity(builder.finish(), window)
            };
        let base = identity(Some("s"), "per-ip", "", 0, false);
        assert_eq!(
            base,
            identity(Some("s"), "per-ip", "", 0, false),
            "stable across calls and instances"
        );
        for other in [
            identity(Some("t"), "per-ip", "", 0, false),
            identity(None, "per-ip", "", 0, false),
            identity(Some("s"), "per-key", "", 0, false),
            identity(Some("s"), "per-ip", "pro", 0, false),
            identity(Some("s"), "per-ip", "", 1, false),
            identity(Some("s"), "per-ip", "", 0, true),
        ] {
            assert_ne!(base, other);
        }
    }

    /// Identities name the Redis keys every instance shares: a change to how they are hashed
    /// would split a limit's count across a rolling upgrade. This pins one.
    #[test]
    fn an_identity_is_the_same_in_every_build() {
        let mut builder = IdentityHasher::new(Some("secret")).start("per-key", "pro");
        builder.add_policy("sliding_window", [(100, 60_000_000_000, 100)].into_iter());
        let key = PartValue::Text(b"k-0123456789abcdef");
        builder.add(
            &KeyPart::Header(HeaderName::from_static("x-api-key")),
            &key,
            false,
        );
        builder.add(
            &KeyPart::Ip,
            &PartValue::Ip("2001:db8::7".parse().unwrap()),
            true,
        );
        builder.add(&KeyPart::Route, &PartValue::Text(&[b'r'; 100]), false);
        assert_eq!(builder.finish(), 0xae26_7ebd_9fd5_81e6_8d41_d6dc_7e48_afda);
    }

    #[test]
    fn field_boundaries_matter() {
        let hasher = IdentityHasher::new(None);
        let mut a = hasher.start("l", "");
        a.add(&KeyPart::Route, &PartValue::Text(b"ab"), false);
        a.add(&KeyPart::Path, &PartValue::Text(b"c"), false);
        let mut b = hasher.start("l", "");
        b.add(&KeyPart::Route, &PartValue::Text(b"a"), false);
        b.add(&KeyPart::Path, &PartValue::Text(b"bc"), false);
        assert_ne!(a.finish(), b.finish());
    }
}
