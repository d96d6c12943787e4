//! Generated responses: no bytes make the reader panic, and the fields it keeps are those a
//! header map stripped of hop-by-hop fields keeps.

use super::*;
use proptest::prelude::*;

use crate::http1::fields::strip_hop_by_hop;
use http::header::TRANSFER_ENCODING;

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

/// A field of a generated head: names from the hop-by-hop and framing sets (in any case)
/// and others, values that may list names.
fn field() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        Just("connection"),
        Just("keep-alive"),
        Just("te"),
        Just("trailer"),
        Just("upgrade"),
        Just("transfer-encoding"),
        Just("content-length"),
        Just("proxy-x"),
        Just("x-a"),
        Just("x-b"),
        Just("date"),
        Just("x-request-id"),
    ];
    let case = any::<u64>();
    let value = prop_oneof![
        Just("x-a"),
        Just("close"),
        Just("X-B, keep-alive"),
        Just("chunked"),
        Just("5"),
        Just(""),
        Just("v"),
    ];
    (name, case, value).prop_map(|(name, case, value)| {
        let name = name
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if case >> (i % 64) & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        (name, value.to_string())
    })
}

proptest! {
    /// The fields kept are those the header map path kept: the map less
    /// `strip_hop_by_hop`, Content-Length apart (passed on unless Transfer-Encoding
    /// overrides it).
    #[test]
    fn the_fields_kept_are_those_a_header_map_stripped_of_hop_by_hop_keeps(
        fields in prop::collection::vec(field(), 0..8),
        status in prop_oneof![Just(200u16), Just(304)],
    ) {
        let pairs: Vec<_> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let Ok(head) = head_of(&format!("HTTP/1.1 {status} X"), false, &pairs) else {
            return Ok(());
        };
        let mut ours = head.fields.into_map();
        let mut map = http::HeaderMap::new();
        for (name, value) in &pairs {
            let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            map.append(name, http::HeaderValue::from_str(value).unwrap());
        }
        let chunked = map.contains_key(TRANSFER_ENCODING);
        strip_hop_by_hop(&mut map);
        let declared = map.remove(CONTENT_LENGTH).filter(|_| !chunked);
        let passed_on = ours.remove(CONTENT_LENGTH);
        prop_assert_eq!(&ours, &map);
        if passed_on.is_some() {
            prop_assert_eq!(passed_on, declared);
        }
    }
}
