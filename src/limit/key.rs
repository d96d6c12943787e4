//! Limit keys: which parts of a request name the identity a limit counts against, and the
//! keyed 128-bit hash that identity is reduced to before it is stored, logged or exported, so
//! API keys never leave the process in clear and a huge header cannot make a huge key. The
//! hash depends only on the configured secret, so every instance of a fleet agrees on it.

use std::borrow::Cow;
use std::hash::Hasher;
use std::net::IpAddr;

use http::{HeaderName, Method};
use siphasher::sip128::{Hasher128, SipHasher13};

use crate::http1::request_fields::{Repeated, RequestFields};
use values::{cookie_value, query_value};

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

/// The facts of a canonical request (`crate::request::canonical`) that keys are built from.
pub struct RequestFacts<'a> {
    /// Already grouped by the IPv6 prefix.
    pub client_ip: IpAddr,
    pub route: &'a str,
    pub method: &'a Method,
    /// The host name, without port.
    pub host: Option<&'a [u8]>,
    pub path: &'a str,
    /// The route matches paths in any case, so a `path` key counts them in lower case.
    pub path_in_any_case: bool,
    pub query: Option<&'a str>,
    pub fields: &'a RequestFields,
}

impl RequestFacts<'_> {
    /// The bytes of one key part: None when the request lacks it (an empty value counts as
    /// absent), `Repeated` when it carries the part more than once, since the upstream may then
    /// read another value than the one counted.
    pub fn value<'s>(&'s self, part: &'s KeyPart) -> Result<Option<PartValue<'s>>, Repeated> {
        fn text(bytes: &[u8]) -> PartValue<'_> {
            PartValue::Text(Cow::Borrowed(bytes))
        }
        Ok(Some(match part {
            KeyPart::Ip => PartValue::Ip(self.client_ip),
            KeyPart::Route => text(self.route.as_bytes()),
            // HEAD is counted as GET, as routes match it: frameworks run the GET handler for
            // it, so alternating the two must not double what a `method` key allows.
            KeyPart::Method if *self.method == Method::HEAD => text(b"GET"),
            KeyPart::Method => text(self.method.as_str().as_bytes()),
            KeyPart::Host => match self.host {
                Some(host) => text(host),
                None => return Ok(None),
            },
            KeyPart::Path if self.path_in_any_case => {
                PartValue::Text(match self.path.bytes().any(|b| b.is_ascii_uppercase()) {
                    true => Cow::Owned(self.path.to_ascii_lowercase().into_bytes()),
                    false => Cow::Borrowed(self.path.as_bytes()),
                })
            }
            KeyPart::Path => text(self.path.as_bytes()),
            KeyPart::Global => text(b""),
            KeyPart::Header(name) => match self.fields.only(name)? {
                Some(value) if !value.is_empty() => text(value),
                _ => return Ok(None),
            },
            KeyPart::Query(name) => match self.query.map(|q| query_value(q, name)) {
                Some(value) => match value? {
                    Some(value) => PartValue::Text(value),
                    None => return Ok(None),
                },
                None => return Ok(None),
            },
            KeyPart::Cookie(name) => match cookie_value(self.fields, name)? {
                Some(value) => PartValue::Text(value),
                None => return Ok(None),
            },
        }))
    }
}

pub enum PartValue<'a> {
    Ip(IpAddr),
    Text(Cow<'a, [u8]>),
}

/// A 128-bit identity hash.
pub(crate) type Identity = u128;

/// Keyed SipHash-1-3 with 128-bit output. Without `hash_secret` the key is a fixed public
/// constant: still the same in every instance, but then low-entropy identities (IPs) can be
/// recovered from the hashes by whoever sees them, so set a secret.
#[derive(Clone)]
pub(crate) struct IdentityHasher {
    key: [u8; 16],
}

impl IdentityHasher {
    pub(crate) fn new(secret: Option<&str>) -> IdentityHasher {
        let mut derive = SipHasher13::new_with_key(b"ratelimit-proxy!");
        derive.write(secret.unwrap_or_default().as_bytes());
        IdentityHasher {
            key: derive.finish128().as_bytes(),
        }
    }

    /// Starts an identity for limit `limit` (and the caller's tier).
    pub(crate) fn start(&self, limit: &str, tier: &str) -> IdentityBuilder {
        let mut hasher = SipHasher13::new_with_key(&self.key);
        write_field(&mut hasher, 0, limit.as_bytes());
        write_field(&mut hasher, 0, tier.as_bytes());
        IdentityBuilder { hasher }
    }
}

#[derive(Clone)]
pub(crate) struct IdentityBuilder {
    hasher: SipHasher13,
}

impl IdentityBuilder {
    /// Adds what the state of a limit means (its algorithm and windows), so a limit whose
    /// rates change gets fresh state instead of reinterpreting the old (e.g. across reloads).
    pub(crate) fn add_policy(
        &mut self,
        algorithm: &str,
        rates: impl Iterator<Item = (u64, u64, u64)>,
    ) {
        write_field(&mut self.hasher, 0xfe, algorithm.as_bytes());
        for (limit, per_ns, burst) in rates {
            self.hasher.write_u64(limit);
            self.hasher.write_u64(per_ns);
            self.hasher.write_u64(burst);
        }
    }

    /// Adds one key part; `fallback` marks the client IP standing in for a missing part, so it
    /// never collides with a real value.
    pub(crate) fn add(&mut self, part: &KeyPart, value: &PartValue<'_>, fallback: bool) {
        let tag = part.tag() | if fallback { 0x80 } else { 0 };
        match value {
            PartValue::Ip(IpAddr::V4(ip)) => write_field(&mut self.hasher, tag, &ip.octets()),
            PartValue::Ip(IpAddr::V6(ip)) => write_field(&mut self.hasher, tag, &ip.octets()),
            PartValue::Text(bytes) => write_field(&mut self.hasher, tag, bytes),
        }
    }

    /// The identity of this limit's key.
    pub(crate) fn finish(self) -> Identity {
        self.hasher.finish128().as_u128()
    }
}

/// The identity of window `window` of a limit: a bijection of the limit's identity, so windows
/// never collide, at no extra hashing per window.
pub(crate) fn window_identity(identity: Identity, window: usize) -> Identity {
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
mod tests;
pub(crate) mod values;
