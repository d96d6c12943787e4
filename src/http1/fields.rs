//! Field names and values as HTTP/1 reads them: what a field is to a proxy (the one
//! definition of the hop-by-hop set, RFC 9110 §7.6.1), comparing names in any case, list
//! values (§5.6.1) and visible text (§5.5).

use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName};

/// What a field is to a proxy (RFC 9110 §7.6.1): the one definition of the hop-by-hop set,
/// for requests and upstream responses alike.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Role {
    EndToEnd,
    Connection,
    ContentLength,
    TransferEncoding,
    Upgrade,
    /// Keep-Alive, TE, Trailer, Proxy-*: for this connection only.
    HopByHop,
    /// X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, X-Original-URL,
    /// X-Rewrite-URL: in a request, they make frameworks execute another method or path than
    /// the one routed and counted, so no request carries them upstream. End to end in a
    /// response.
    Override,
    /// End to end, told apart so that a request's Host is found without comparing names.
    Host,
}

impl Role {
    /// Never forwarded in a request: for this connection only, or an override of what was
    /// judged.
    pub(crate) fn is_hop_by_hop(self) -> bool {
        !matches!(self, Role::EndToEnd | Role::ContentLength | Role::Host)
    }

    /// The role that only fields called `name` have, if it has one of its own: finding such
    /// a field compares roles, not names.
    pub(crate) fn only_of(name: &HeaderName) -> Option<Role> {
        // Standard names compare as small numbers (matching the text would compare bytes).
        if *name == HOST {
            Some(Role::Host)
        } else if *name == CONNECTION {
            Some(Role::Connection)
        } else if *name == UPGRADE {
            Some(Role::Upgrade)
        } else if *name == CONTENT_LENGTH {
            Some(Role::ContentLength)
        } else if *name == TRANSFER_ENCODING {
            Some(Role::TransferEncoding)
        } else {
            None
        }
    }
}

/// `name`'s role, in any case. By length and first letter: most names differ from all of
/// these in those alone; the rest are compared eight bytes at a time (`same_name`).
pub(crate) fn role(name: &[u8]) -> Role {
    let is = |known: &str| same_name(name, known.as_bytes());
    let Some(first) = name.first().map(u8::to_ascii_lowercase) else {
        return Role::EndToEnd;
    };
    match (name.len(), first) {
        (2, b't') if is("te") => Role::HopByHop,
        (4, b'h') if is("host") => Role::Host,
        (7, b't') if is("trailer") => Role::HopByHop,
        (7, b'u') if is("upgrade") => Role::Upgrade,
        (10, b'c') if is("connection") => Role::Connection,
        (10, b'k') if is("keep-alive") => Role::HopByHop,
        (13, b'x') if is("x-http-method") || is("x-rewrite-url") => Role::Override,
        (14, b'x') if is("x-original-url") => Role::Override,
        (17, b'x') if is("x-method-override") => Role::Override,
        (22, b'x') if is("x-http-method-override") => Role::Override,
        (14, b'c') if is("content-length") => Role::ContentLength,
        (17, b't') if is("transfer-encoding") => Role::TransferEncoding,
        (6.., b'p') if same_name(&name[..6], b"proxy-") => Role::HopByHop,
        _ => Role::EndToEnd,
    }
}

/// Removes Connection and every header it names, and every hop-by-hop header (`role`).
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names before removing anything.
    let any = headers.keys().any(is_hop_by_hop);
    if !any {
        return;
    }
    let named = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| visible_text(value.as_bytes()))
        .flat_map(|list| list_items(list.as_bytes()))
        .filter_map(|token| HeaderName::from_bytes(token).ok());
    let hop_by_hop = headers.keys().filter(|name| is_hop_by_hop(name)).cloned();
    let gone: Vec<HeaderName> = named.chain(hop_by_hop).collect();
    for name in gone {
        headers.remove(name);
    }
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    role(name.as_str().as_bytes()).is_hop_by_hop()
}

/// The items of a comma-separated list field value (RFC 9110 §5.6.1), blanks trimmed.
pub(crate) fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// True when the list field value `value` holds `token`, in any case.
pub(crate) fn lists(value: &[u8], token: &[u8]) -> bool {
    list_items(value).any(|item| item.eq_ignore_ascii_case(token))
}

/// Whether `field` is `lower` (a `HeaderName`: lowercase ASCII) in any case, eight bytes at a
/// time: the byte-at-a-time `eq_ignore_ascii_case` spends several instructions on every byte,
/// and lookups are most of what a request's fields cost.
pub(crate) fn same_name(field: &[u8], lower: &[u8]) -> bool {
    if field.len() != lower.len() {
        return false;
    }
    let word = |chunk: &[u8]| u64::from_le_bytes(chunk.try_into().unwrap_or_default());
    let (mut fields, mut lowers) = (field.chunks_exact(8), lower.chunks_exact(8));
    let words_match = (&mut fields)
        .zip(&mut lowers)
        .all(|(f, l)| ascii_lowercase(word(f)) == word(l));
    words_match
        && (fields.remainder().iter())
            .zip(lowers.remainder())
            .all(|(f, l)| f.to_ascii_lowercase() == *l)
}

/// Each byte of `word` lowered when it is an ASCII capital letter. A byte of 0x80 or more
/// may carry into its neighbour's test, but keeps its top bit, so it never equals ASCII.
fn ascii_lowercase(word: u64) -> u64 {
    const EACH: u64 = 0x0101_0101_0101_0101;
    // The top bit of a byte is set when it is >= 'A' and not >= 'Z' + 1.
    let at_least_a = word.wrapping_add(EACH * (0x80 - u64::from(b'A')));
    let beyond_z = word.wrapping_add(EACH * (0x80 - u64::from(b'Z') - 1));
    let capitals = at_least_a & !beyond_z & (EACH * 0x80);
    word | (capitals >> 2)
}

/// A value as text when it is visible ASCII and tabs (`HeaderValue::to_str`'s rule).
pub(crate) fn visible_text(value: &[u8]) -> Option<&str> {
    if is_visible_text(value) {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

/// Whether `value` is visible ASCII and tabs, read as text where text is needed. Eight bytes
/// at a time, then the last eight (overlapping ones already seen): the Host nearly every
/// request carries is checked here, and a byte at a time took several instructions a byte.
pub(crate) fn is_visible_text(value: &[u8]) -> bool {
    let visible = |bytes: &[u8]| {
        bytes
            .iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
    };
    if value.len() < 8 {
        return visible(value);
    }
    let tail = (!value.len().is_multiple_of(8)).then(|| &value[value.len() - 8..]);
    // A word holding a tab is read again a byte at a time.
    (value.chunks_exact(8).chain(tail)).all(|word| all_printable(word) || visible(word))
}

/// Whether every byte of an eight-byte `word` is printable ASCII, a space to `~`.
fn all_printable(word: &[u8]) -> bool {
    const EACH: u64 = 0x0101_0101_0101_0101;
    const TOP: u64 = EACH * 0x80;
    let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
    // A top bit set after the subtraction and clear before: a byte below a space (a borrow
    // may flag bytes above it too, but only when one was found). After adding one, or
    // before: a byte of 0x7f or more (a carry, likewise, only after one).
    let below_space = word.wrapping_sub(EACH * 0x20) & !word & TOP;
    let above_tilde = (word.wrapping_add(EACH) | word) & TOP;
    below_space | above_tilde == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_told_in_any_case_and_near_misses_are_end_to_end() {
        for (name, expected) in [
            ("Connection", Role::Connection),
            ("KEEP-ALIVE", Role::HopByHop),
            ("Te", Role::HopByHop),
            ("trailer", Role::HopByHop),
            ("Transfer-Encoding", Role::TransferEncoding),
            ("Upgrade", Role::Upgrade),
            ("Content-Length", Role::ContentLength),
            ("HOST", Role::Host),
            ("hosts", Role::EndToEnd),
            ("Proxy-Authenticate", Role::HopByHop),
            ("proxy-", Role::HopByHop),
            ("tex", Role::EndToEnd),
            ("trailers", Role::EndToEnd),
            ("upgrades", Role::EndToEnd),
            ("content-type", Role::EndToEnd),
            ("proxy", Role::EndToEnd),
            ("x-proxy-id", Role::EndToEnd),
            ("X-HTTP-Method-Override", Role::Override),
            ("x-http-method", Role::Override),
            ("X-Method-Override", Role::Override),
            ("X-Original-URL", Role::Override),
            ("x-rewrite-url", Role::Override),
            ("x-http-methods", Role::EndToEnd),
            ("x-original-uri", Role::EndToEnd),
            ("", Role::EndToEnd),
        ] {
            assert_eq!(role(name.as_bytes()), expected, "{name:?}");
        }
    }
}
