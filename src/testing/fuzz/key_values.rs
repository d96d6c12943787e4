//! The `query:` and `cookie:` key parts' readers, over a query string and Cookie lines: a value
//! read is never empty (an empty one, quoted or not, is absent: `session=""` is no session);
//! the pair given once more makes the part repeated; and an empty pair added where none was
//! found leaves it absent or repeated, never a value.

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};

use crate::http1::request_fields::{Repeated, RequestFields};
use crate::limit::key::values::{cookie_value, query_value};

/// `bytes` as text: the query string (`key` is read), then after the first newline the Cookie
/// lines (`session` is read), one a line.
pub fn key_values(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let (query, cookies) = text.split_once('\n').unwrap_or((&text, ""));
    query_holds(query);
    let lines: Vec<&str> = cookies.split('\n').collect();
    cookies_hold(&lines);
}

fn query_holds(query: &str) {
    let read = query_value(query, "key");
    if let Ok(Some(value)) = &read {
        assert!(!value.is_empty(), "{query:?}");
        let again = format!("{query}&key=x");
        assert_eq!(query_value(&again, "key"), Err(Repeated), "{query:?}");
    }
    if let Ok(None) = read {
        let emptied = format!("{query}&key=");
        assert!(
            !matches!(query_value(&emptied, "key"), Ok(Some(_))),
            "{query:?}"
        );
    }
}

fn cookies_hold(lines: &[&str]) {
    let read = cookie_value(&fields(lines, None), "session").map(|v| v.map(|v| v.into_owned()));
    if let Ok(Some(value)) = &read {
        assert!(!value.is_empty(), "{lines:?}");
        let again = fields(lines, Some("session=x"));
        assert_eq!(cookie_value(&again, "session"), Err(Repeated), "{lines:?}");
    }
    if let Ok(None) = read {
        for empty in ["session=\"\"", "session=", "session=%22%22"] {
            let emptied = fields(lines, Some(empty));
            let read = cookie_value(&emptied, "session");
            assert!(!matches!(read, Ok(Some(_))), "{lines:?} + {empty}");
        }
    }
}

/// `lines` (those a client could send) as Cookie fields, and `extra` as one more.
fn fields(lines: &[&str], extra: Option<&str>) -> RequestFields {
    let mut map = HeaderMap::new();
    for line in lines.iter().chain(extra.as_ref()) {
        if let Ok(value) = HeaderValue::from_str(line) {
            map.append(COOKIE, value);
        }
    }
    RequestFields::Map(map)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// Text made of the pieces the readers split, unquote and decode at: most such inputs
    /// hold `key` and `session` pairs, quoted, empty, escaped or repeated.
    fn pieces() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("session"),
            Just("key"),
            Just("s%65ssion"),
            Just("="),
            Just("\""),
            Just("%22"),
            Just("\\"),
            Just(";"),
            Just(","),
            Just("&"),
            Just(" "),
            Just("\n"),
            Just("x"),
        ];
        prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn the_readers_keep_their_invariants_on_any_arrangement_of_pairs(text in pieces()) {
            super::key_values(text.as_bytes());
        }
    }
}
