//! What the gateway's canonical request step changes in a request's fields: Host taken out to
//! be judged and written by the gateway, names with `_` dropped, and a field that must appear
//! at most once told apart from one repeated.

use bytes::Bytes;
use http::header::{COOKIE, HOST, TRANSFER_ENCODING};
use http::{HeaderName, HeaderValue};

use super::{FieldLines, RequestFields};
use crate::http1::fields::{Role, list_items};

/// A field that may appear once appeared on more than one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeated;

impl FieldLines {
    fn take_host(&mut self) -> (usize, Option<Bytes>) {
        let mut hosts = self.places.iter().filter(|place| place.role == Role::Host);
        let Some(first) = hosts.next().copied() else {
            return (0, None);
        };
        let count = 1 + hosts.count();
        self.places.retain(|place| place.role != Role::Host);
        let (start, end) = first.value();
        (count, Some(self.head.slice(start as usize..end as usize)))
    }

    fn drop_underscored(&mut self) {
        let head = &self.head;
        (self.places).retain(|place| {
            let (start, end) = place.name();
            !head[start as usize..end as usize].contains(&b'_')
        });
        self.underscored = false;
    }
}

impl RequestFields {
    /// Takes every Host field out: how many lines there were, and the first one's value.
    pub fn take_host(&mut self) -> (usize, Option<Bytes>) {
        match self {
            RequestFields::Map(map) => {
                let count = map.get_all(HOST).iter().count();
                let first = map.remove(HOST);
                (count, first.map(|v| Bytes::copy_from_slice(v.as_bytes())))
            }
            RequestFields::Lines(lines) => lines.take_host(),
        }
    }

    /// The first field name with a `_`, if any.
    pub fn first_underscored(&self) -> Option<String> {
        match self {
            RequestFields::Map(map) => map
                .keys()
                .find(|name| name.as_str().contains('_'))
                .map(|name| name.as_str().to_owned()),
            RequestFields::Lines(lines) if lines.underscored => {
                let mut found = None;
                self.each(|name, _| {
                    if found.is_none() && name.contains(&b'_') {
                        found = Some(String::from_utf8_lossy(name).into_owned());
                    }
                });
                found
            }
            RequestFields::Lines(_) => None,
        }
    }

    /// Drops every field whose name has a `_` (nginx's `underscores_in_headers off`).
    pub fn drop_underscored(&mut self) {
        match self {
            RequestFields::Map(map) => {
                let gone: Vec<HeaderName> = (map.keys())
                    .filter(|name| name.as_str().contains('_'))
                    .cloned()
                    .collect();
                for name in gone {
                    map.remove(name);
                }
            }
            RequestFields::Lines(lines) if lines.underscored => lines.drop_underscored(),
            RequestFields::Lines(_) => {}
        }
    }

    /// The first field whose value starts or ends with a space or tab. httparse trims them off
    /// HTTP/1 values; an HTTP/2 value may not have them (RFC 9113 §8.2.1), and a key counted with
    /// them would differ from the key an HTTP/1 upstream reads.
    pub fn first_padded(&self) -> Option<&str> {
        let RequestFields::Map(map) = self else {
            return None;
        };
        let padded = |value: &HeaderValue| {
            let bytes = value.as_bytes();
            let blank = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
            blank(bytes.first()) || blank(bytes.last())
        };
        (map.iter())
            .find(|(_, value)| padded(value))
            .map(|(name, _)| name.as_str())
    }

    /// The transfer codings a request lists other than a final `chunked`, if any: a body
    /// framed so is passed on as it was sent, and only `chunked` is undone here.
    pub fn transfer_codings(&self) -> Option<String> {
        let RequestFields::Map(map) = self else {
            return None;
        };
        let listed: Vec<&[u8]> = (map.get_all(TRANSFER_ENCODING).iter())
            .flat_map(|value| list_items(value.as_bytes()))
            .collect();
        match listed[..] {
            [] => None,
            [coding] if coding.eq_ignore_ascii_case(b"chunked") => None,
            _ => Some(String::from_utf8_lossy(&listed.join(&b", "[..])).into_owned()),
        }
    }

    /// Joins HTTP/2's cookie crumbs into one field, as RFC 9113 §8.2.3 requires before a
    /// request goes on over HTTP/1.1.
    pub fn join_cookies(&mut self) {
        let RequestFields::Map(map) = self else {
            return;
        };
        if map.get_all(COOKIE).iter().nth(1).is_none() {
            return;
        }
        let crumbs: Vec<&[u8]> = map
            .get_all(COOKIE)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect();
        if let Ok(joined) = HeaderValue::from_bytes(&crumbs.join(&b"; "[..])) {
            map.insert(COOKIE, joined);
        }
    }

    /// The value of `name` when it is on one line at most; `Repeated` when on more.
    pub fn only<'a>(&'a self, name: &'a HeaderName) -> Result<Option<&'a [u8]>, Repeated> {
        let mut values = self.get_all(name);
        let first = values.next();
        match values.next() {
            Some(_) => Err(Repeated),
            None => Ok(first),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::request_fields::tests::{lines_of, map_like};

    /// `pairs` as hyper's map and as the own server's lines.
    fn both(head: &str) -> [RequestFields; 2] {
        let lines = lines_of(head.as_bytes());
        [RequestFields::Map(map_like(&lines)), lines]
    }

    #[test]
    fn host_lines_are_counted_and_taken_out() {
        let head = "GET / HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\nhost: b\r\n\r\n";
        for mut fields in both(head) {
            let (count, first) = fields.take_host();
            assert_eq!((count, &first.unwrap()[..]), (2, &b"a.example"[..]));
            assert_eq!(fields.pairs(), [("x-a".into(), "1".into())]);
            assert_eq!(fields.take_host(), (0, None));
        }
    }

    #[test]
    fn underscored_names_are_found_and_dropped() {
        let head = "GET / HTTP/1.1\r\nX-A: 1\r\nTransfer_Encoding: chunked\r\nX_Key: k\r\n\r\n";
        for mut fields in both(head) {
            assert_eq!(
                fields.first_underscored().unwrap().to_ascii_lowercase(),
                "transfer_encoding"
            );
            fields.drop_underscored();
            assert_eq!(fields.pairs(), [("x-a".into(), "1".into())]);
            assert_eq!(fields.first_underscored(), None);
        }
    }

    #[test]
    fn a_field_on_two_lines_is_repeated() {
        let key = HeaderName::from_static("x-api-key");
        for fields in both("GET / HTTP/1.1\r\nX-Api-Key: a\r\nx-api-key: b\r\n\r\n") {
            assert_eq!(fields.only(&key), Err(Repeated));
        }
        for fields in both("GET / HTTP/1.1\r\nX-Api-Key: a, b\r\n\r\n") {
            assert_eq!(fields.only(&key), Ok(Some(&b"a, b"[..])));
        }
        for fields in both("GET / HTTP/1.1\r\nX-Other: a\r\n\r\n") {
            assert_eq!(fields.only(&key), Ok(None));
        }
    }
}
