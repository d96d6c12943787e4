use super::*;
use crate::http1::fields::{is_visible_text, role, same_name, visible_text};
use proptest::collection::vec;
use proptest::prelude::*;

/// The fields of `head` (a whole request head) as the own server records them.
pub(crate) fn lines_of(head: &[u8]) -> RequestFields {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut fields);
    assert!(request.parse(head).unwrap().is_complete());
    let mut lines = FieldLines::default();
    for field in request.headers.iter() {
        let name = field.name.as_bytes();
        lines.push(head, name, field.value, role(name)).unwrap();
    }
    RequestFields::Lines(lines.in_head(Bytes::copy_from_slice(head)))
}

/// `map`'s fields as the own server would record them from a head that carried them, names
/// in title case (`X-Forwarded-For`).
pub(crate) fn lines_like(map: &HeaderMap) -> RequestFields {
    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
    for (name, value) in map {
        head.extend_from_slice(title_case(name.as_str()).as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    lines_of(&head)
}

fn title_case(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper { c.to_ascii_uppercase() } else { c };
            upper = c == '-';
            out
        })
        .collect()
}

/// The fields of `lines` in a map, as hyper would have read them.
pub(crate) fn map_like(lines: &RequestFields) -> HeaderMap {
    let pairs = lines.pairs();
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    map_of(&borrowed)
}

pub(crate) fn map_of(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn encoded(fields: &RequestFields, keep: impl Fn(&[u8]) -> bool) -> String {
    let mut buf = Vec::new();
    fields.encode(&mut buf, keep);
    String::from_utf8(buf).unwrap()
}

#[test]
fn lookups_match_names_in_any_case_and_keep_the_order_of_values() {
    let fields = lines_of(
        b"GET / HTTP/1.1\r\nHost: api\r\nX-Forwarded-For: 1.1.1.1\r\naccept: */*\r\n\
          x-forwarded-for: 2.2.2.2\r\nX-EMPTY:\r\n\r\n",
    );
    let xff = HeaderName::from_static("x-forwarded-for");
    assert_eq!(fields.get(&http::header::HOST), Some(&b"api"[..]));
    assert_eq!(fields.value(&http::header::HOST).unwrap(), "api");
    let all: Vec<&[u8]> = fields.get_all(&xff).collect();
    assert_eq!(all, [&b"1.1.1.1"[..], b"2.2.2.2"]);
    let reversed: Vec<&[u8]> = fields.get_all(&xff).rev().collect();
    assert_eq!(reversed, [&b"2.2.2.2"[..], b"1.1.1.1"]);
    assert_eq!(
        fields.get(&HeaderName::from_static("x-empty")),
        Some(&b""[..])
    );
    assert!(!fields.contains(&http::header::COOKIE));
    assert!(fields.contains(&http::header::ACCEPT));
    let map = map_of(&[
        ("host", "api"),
        ("x-forwarded-for", "1.1.1.1"),
        ("accept", "*/*"),
        ("x-forwarded-for", "2.2.2.2"),
        ("x-empty", ""),
    ]);
    assert_eq!(
        fields.encoded_size(),
        RequestFields::Map(map).encoded_size()
    );
}

#[test]
fn adjacent_lines_are_copied_as_they_are_and_others_written_anew() {
    let fields = lines_of(
        b"GET / HTTP/1.1\r\nHost:api\r\nX-Drop: 1\r\nAccept:   */*\r\nX-A: a\r\nX-B: b\nX-C: c\r\n\r\n",
    );
    let out = encoded(&fields, |name| !name.eq_ignore_ascii_case(b"x-drop"));
    // A bare LF line is ended with CRLF; the others keep their spelling and blanks.
    assert_eq!(
        out,
        "Host:api\r\nAccept:   */*\r\nX-A: a\r\nX-B: b\r\nX-C: c\r\n"
    );
    assert_eq!(encoded(&fields, |_| false), "");
}

#[test]
fn stripping_takes_out_the_hop_by_hop_set_and_what_connection_names() {
    let head = b"GET / HTTP/1.1\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\n\
                 X-Secret: 1\r\nTE: trailers\r\nTrailer: x-sum\r\nProxy-Authorization: Basic x\r\n\
                 Accept: */*\r\nx-secret: 2\r\n\r\n";
    let mut fields = lines_of(head);
    fields.strip_hop_by_hop();
    assert_eq!(fields.pairs(), [("accept".to_string(), "*/*".to_string())]);
    assert_eq!(encoded(&fields, |_| true), "Accept: */*\r\n");
    assert!(!fields.contains(&http::header::CONNECTION));
    let mut plain = lines_of(b"GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n");
    plain.strip_hop_by_hop();
    assert_eq!(encoded(&plain, |_| true), "Host: a\r\nAccept: */*\r\n");
}

#[test]
fn visible_text_follows_header_values_to_str() {
    for value in [
        &b"plain"[..],
        b"tab\there",
        b"",
        b"\xc3\xa9",
        b"del\x7f",
        b" x ",
    ] {
        let expected = HeaderValue::from_bytes(value)
            .ok()
            .and_then(|v| v.to_str().ok().map(str::to_owned));
        assert_eq!(
            visible_text(value).map(str::to_owned),
            expected,
            "{value:?}"
        );
    }
}

#[test]
fn names_are_the_same_in_any_case_and_nothing_else_is() {
    assert!(same_name(b"X-Forwarded-FOR", b"x-forwarded-for"));
    assert!(same_name(b"", b""));
    assert!(!same_name(b"x-forwarded-fo", b"x-forwarded-for"));
    assert!(!same_name(b"x-forwarded-foq", b"x-forwarded-for"));
    assert!(!same_name(b"X_API-KEY", b"x-api-key"));
    // '@' and '[' sit just outside A..Z; 0xC1 + 0x3F carries.
    assert!(!same_name(b"@[\xc1aaaaa", b"`{\x81aaaaa"));
}

/// A field name from a small pool, so names repeat, in any case.
fn name() -> impl Strategy<Value = String> {
    let names = prop_oneof![
        Just("host"),
        Just("x-forwarded-for"),
        Just("connection"),
        Just("keep-alive"),
        Just("proxy-authorization"),
        Just("trailer"),
        Just("accept"),
        Just("x-request-id"),
        Just("x-a"),
        Just("upgrade"),
        Just("content-length"),
    ];
    (names, vec(any::<bool>(), 20)).prop_map(|(name, upper)| {
        name.chars()
            .zip(upper)
            .map(|(c, up)| if up { c.to_ascii_uppercase() } else { c })
            .collect()
    })
}

/// `lines` and `map` give the same values for each name of the pool, and one not in it.
fn same_lookups(lines: &RequestFields, map: &RequestFields) -> Result<(), TestCaseError> {
    for name in [
        "host",
        "x-forwarded-for",
        "connection",
        "keep-alive",
        "accept",
        "x-a",
        "cookie",
        "upgrade",
        "content-length",
        "transfer-encoding",
    ] {
        let name = HeaderName::from_static(name);
        prop_assert_eq!(lines.get(&name), map.get(&name));
        prop_assert_eq!(lines.value(&name), map.value(&name));
        prop_assert_eq!(lines.contains(&name), map.contains(&name));
        let all = |fields: &RequestFields| {
            fields
                .get_all(&name)
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        };
        prop_assert_eq!(all(lines), all(map));
        let back = |fields: &RequestFields| {
            fields
                .get_all(&name)
                .rev()
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        };
        prop_assert_eq!(back(lines), back(map));
    }
    Ok(())
}

proptest! {
    /// Eight bytes at a time, a value is visible text exactly when each byte is a tab or
    /// printable ASCII: around every bound (tab, space, `~`, DEL, the top bit) at any place.
    #[test]
    fn visible_text_is_each_byte_a_tab_or_printable(
        value in vec(prop_oneof![
            4 => 0x20u8..0x7f,
            1 => prop::sample::select(vec![0u8, 0x08, 0x09, 0x0a, 0x1f, 0x20, 0x7e, 0x7f, 0x80, 0xc3, 0xfe, 0xff]),
        ], 0..40),
    ) {
        let expected = value.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
        prop_assert_eq!(is_visible_text(&value), expected);
    }

    /// Eight bytes at a time, names compare as `eq_ignore_ascii_case` compares them, for any
    /// bytes against any lowercase ASCII.
    #[test]
    fn names_compare_as_eq_ignore_ascii_case_does(
        pairs in vec((any::<u8>(), 0u8..0x80), 0..40),
        same in any::<bool>(),
    ) {
        let lower: Vec<u8> = pairs.iter().map(|(_, l)| l.to_ascii_lowercase()).collect();
        let field: Vec<u8> = if same {
            // The same name with some letters capitalised by the first byte's bits.
            lower.iter().zip(&pairs).map(|(l, (f, _))| if f & 1 == 1 { l.to_ascii_uppercase() } else { *l }).collect()
        } else {
            pairs.iter().map(|(f, _)| *f).collect()
        };
        prop_assert_eq!(same_name(&field, &lower), field.eq_ignore_ascii_case(&lower));
    }

    /// The own server's fields answer every question as hyper's map of the same head does.
    #[test]
    fn lines_read_as_the_map_of_the_same_head(
        fields in vec((name(), "[!-~]([ -~]{0,10}[!-~])?|x-a|keep-alive, x-a"), 0..10),
        bare_lf in any::<prop::sample::Index>(),
    ) {
        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        let mut map = HeaderMap::new();
        let lf_at = bare_lf.index(fields.len() + 1);
        for (i, (name, value)) in fields.iter().enumerate() {
            let end: &[u8] = if i == lf_at { b"\n" } else { b"\r\n" };
            head.extend_from_slice(format!("{name}: {value}").as_bytes());
            head.extend_from_slice(end);
            map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        head.extend_from_slice(b"\r\n");
        let mut lines = lines_of(&head);
        let mut map = RequestFields::Map(map);
        let sorted = |fields: &RequestFields| {
            let mut pairs = fields.pairs();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            pairs
        };
        prop_assert_eq!(lines.encoded_size(), map.encoded_size());
        prop_assert_eq!(sorted(&lines), sorted(&map));
        same_lookups(&lines, &map)?;
        lines.strip_hop_by_hop();
        map.strip_hop_by_hop();
        prop_assert_eq!(sorted(&lines), sorted(&map));
        prop_assert_eq!(lines.encoded_size(), map.encoded_size());
        same_lookups(&lines, &map)?;
        // What is written reads back as the map's fields, every line in order.
        let keep = |name: &[u8]| !name.eq_ignore_ascii_case(b"x-request-id");
        let written = format!("GET / HTTP/1.1\r\n{}\r\n", encoded(&lines, keep));
        let read_back = lines_of(written.as_bytes());
        let expected: Vec<(String, String)> =
            lines.pairs().into_iter().filter(|(name, _)| name != "x-request-id").collect();
        prop_assert_eq!(read_back.pairs(), expected);
    }
}

proptest! {
    /// Eight bytes at a time, the same answer as a byte at a time.
    #[test]
    fn an_underscore_is_found_wherever_it_is(name in "[a-zA-Z0-9_-]{0,40}") {
        prop_assert_eq!(has_underscore(name.as_bytes()), name.contains('_'));
    }
}
