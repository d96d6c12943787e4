//! X-Request-Id: a sane incoming id is kept so traces join up across hops; anything else is
//! replaced by a fresh random one.

use http::HeaderValue;

use crate::http1::request_fields::RequestFields;

pub(crate) const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

const MAX_LEN: usize = 128;

/// A request's id: the client's own, sharing the bytes of its head, or one minted here and
/// held inline. (A minted id in a `HeaderValue` cost an allocation, and a second one when it
/// was first cloned for the upstream, on every request that came without an id.)
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RequestId {
    Kept(HeaderValue),
    Minted([u8; 32]),
}

impl RequestId {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            RequestId::Kept(value) => value.as_bytes(),
            RequestId::Minted(hex) => hex,
        }
    }

    /// As text: a kept id is visible ASCII (`is_sane`), a minted one hex digits.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

/// The incoming id when it is 1 to 128 visible ASCII characters, or a new one.
pub(crate) fn keep_or_mint(fields: &RequestFields) -> RequestId {
    match fields.value(&X_REQUEST_ID) {
        Some(value) if is_sane(value.as_bytes()) => RequestId::Kept(value),
        _ => mint(),
    }
}

fn is_sane(id: &[u8]) -> bool {
    !id.is_empty() && id.len() <= MAX_LEN && id.iter().all(|b| (0x21..=0x7e).contains(b))
}

/// 128 random bits as 32 lower-case hex digits.
pub(crate) fn mint() -> RequestId {
    let id = fastrand::u128(..);
    // By hand: one per request that arrives without an id, and `format!`'s machinery costs
    // far more than a table lookup; a byte's two digits at once, as a digit at a time each
    // took a shift of the whole u128.
    let mut text = [0u8; 32];
    for (pair, byte) in text.chunks_exact_mut(2).zip(id.to_be_bytes()) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(byte)]);
    }
    RequestId::Minted(text)
}

/// Each byte's two lower-case hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        pairs[byte] = [HEX[byte >> 4], HEX[byte & 0xf]];
        byte += 1;
    }
    pairs
};

#[cfg(test)]
mod tests {
    use super::*;

    fn with_id(id: &[u8]) -> RequestFields {
        let mut headers = http::HeaderMap::new();
        headers.insert(X_REQUEST_ID, HeaderValue::from_bytes(id).unwrap());
        RequestFields::Map(headers)
    }

    #[test]
    fn keeps_a_sane_id() {
        assert_eq!(keep_or_mint(&with_id(b"req-42_A.b")).as_str(), "req-42_A.b");
        let head = b"GET / HTTP/1.1\r\nX-Request-ID: req-7\r\n\r\n";
        let lines = crate::http1::request_fields::tests::lines_of(head);
        assert_eq!(keep_or_mint(&lines).as_str(), "req-7");
        let longest = vec![b'a'; 128];
        assert_eq!(keep_or_mint(&with_id(&longest)).as_bytes(), &longest[..]);
    }

    #[test]
    fn replaces_empty_long_or_odd_ids() {
        for bad in [
            &b""[..],
            &[b'a'; 129][..],
            b"has space",
            b"tab\there",
            &[0xc3, 0xa9],
        ] {
            let minted = keep_or_mint(&with_id(bad));
            assert_ne!(minted.as_bytes(), bad);
            assert!(matches!(minted, RequestId::Minted(_)));
            assert_eq!(minted.as_str().len(), 32);
        }
    }

    #[test]
    fn a_minted_id_is_the_random_number_in_hex() {
        // 200 ids are 3,200 random bytes: every one of the 256 byte values, almost surely.
        for seed in 0..200 {
            fastrand::seed(seed);
            let expected = format!("{:032x}", fastrand::u128(..));
            fastrand::seed(seed);
            assert_eq!(mint().as_str(), expected);
        }
    }

    #[test]
    fn mints_distinct_ids_when_absent() {
        assert_ne!(
            keep_or_mint(&RequestFields::Map(http::HeaderMap::new())),
            keep_or_mint(&RequestFields::Map(http::HeaderMap::new()))
        );
    }
}
