//! Query parameters and cookies as upstreams read them. Parsers disagree (`;` separates query
//! parameters to some, `,` cookies to others; some decode `%XX` in cookies, `%uXXXX` in
//! queries, backslash escapes in quoted cookies), so a key part is read the way that finds the
//! most: every pair any of them would see is looked at, and a name found twice is `Repeated`.
//! A spelling that one upstream decodes cannot then be counted apart from the plain one.

use std::borrow::Cow;

use http::header::COOKIE;

use crate::http1::request_fields::{Repeated, RequestFields};

/// The value of the query parameter `name`, names and values decoded as
/// `application/x-www-form-urlencoded` (and `%uXXXX`), pairs separated by `&` or `;`.
pub(crate) fn query_value<'q>(
    query: &'q str,
    name: &str,
) -> Result<Option<Cow<'q, [u8]>>, Repeated> {
    let pairs = query.as_bytes().split(|&b| b == b'&' || b == b';');
    only_one(pairs, name, |text| decoded(text, true))
}

/// The cookie called `name` across Cookie lines, pairs separated by `;` or `,`, its value
/// unquoted (RFC 6265 §4.1.1, and backslash escapes inside the quotes) and `%XX` decoded.
/// None when it is empty once unquoted (`session=""`): upstreams read that as no session,
/// so counting it would let a client spend a bucket nobody owns.
pub(crate) fn cookie_value<'h>(
    fields: &'h RequestFields,
    name: &str,
) -> Result<Option<Cow<'h, [u8]>>, Repeated> {
    let pairs = (fields.get_all(&COOKIE))
        .flat_map(|line| line.split(|&b| b == b';' || b == b','))
        .map(<[u8]>::trim_ascii);
    let value = only_one(pairs, name, |text| decoded(text, false))?;
    let value = value.map(|value| match unquoted(&value) {
        Some(unquoted) => Cow::Owned(unquoted),
        None => value,
    });
    Ok(value.filter(|value| !value.is_empty()))
}

/// The decoded value of the one pair of `pairs` whose decoded name is `name`; None when there
/// is none or its value is empty.
fn only_one<'a>(
    pairs: impl Iterator<Item = &'a [u8]>,
    name: &str,
    decode: impl Fn(&'a [u8]) -> Cow<'a, [u8]>,
) -> Result<Option<Cow<'a, [u8]>>, Repeated> {
    let mut found: Option<Cow<'a, [u8]>> = None;
    for pair in pairs {
        let (key, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &b""[..]),
        };
        if decode(key.trim_ascii()).as_ref() != name.as_bytes() {
            continue;
        }
        if found.is_some() {
            return Err(Repeated);
        }
        found = Some(decode(value.trim_ascii()));
    }
    Ok(found.filter(|value| !value.is_empty()))
}

/// `%XX` as its byte and `%uXXXX` as its character in UTF-8 (and, in a form, `+` as a
/// space); an escape without its hex digits stays as it is.
fn decoded(text: &[u8], form: bool) -> Cow<'_, [u8]> {
    if !text.iter().any(|&b| b == b'%' || (form && b == b'+')) {
        return Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some((&byte, tail)) = rest.split_first() {
        let (bytes, width): (Vec<u8>, usize) = match byte {
            b'+' if form => (vec![b' '], 1),
            b'%' => match escape(tail) {
                Some((bytes, width)) => (bytes, width + 1),
                None => (vec![b'%'], 1),
            },
            byte => (vec![byte], 1),
        };
        out.extend_from_slice(&bytes);
        rest = &rest[width..];
    }
    Cow::Owned(out)
}

/// The bytes an escape after `%` stands for, and how many bytes it took: `XX` or `uXXXX`.
fn escape(text: &[u8]) -> Option<(Vec<u8>, usize)> {
    let hex = |digits: &[u8]| u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok();
    let is_hex = |digits: &[u8]| digits.iter().all(u8::is_ascii_hexdigit);
    if let Some(digits) = text
        .get(1..5)
        .filter(|_| text[0] == b'u' || text[0] == b'U')
    {
        let character = char::from_u32(hex(digits).filter(|_| is_hex(digits))?)?;
        return Some((character.to_string().into_bytes(), 5));
    }
    let digits = text.get(..2).filter(|digits| is_hex(digits))?;
    Some((vec![hex(digits)? as u8], 2))
}

/// A quoted cookie value without its quotes, backslash escapes undone (`\101` octal, `\"`),
/// as Python's `http.cookies` reads it; None when it is not quoted.
fn unquoted(value: &[u8]) -> Option<Vec<u8>> {
    let inside = value.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut out = Vec::with_capacity(inside.len());
    let mut rest = inside;
    while let Some((&byte, tail)) = rest.split_first() {
        rest = tail;
        if byte != b'\\' {
            out.push(byte);
            continue;
        }
        let octal = tail
            .get(..3)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (octal, tail.first()) {
            (Some(digits), _) => {
                let value = digits.iter().fold(0u32, |n, d| n * 8 + u32::from(d - b'0'));
                out.push(value as u8);
                rest = &tail[3..];
            }
            (None, Some(&next)) => {
                out.push(next);
                rest = &tail[1..];
            }
            (None, None) => out.push(b'\\'),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::request_fields::tests::lines_of;

    fn query(text: &str) -> Result<Option<String>, Repeated> {
        let value = query_value(text, "key")?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    fn cookie(lines: &str) -> Result<Option<String>, Repeated> {
        let fields = lines_of(format!("GET / HTTP/1.1\r\n{lines}\r\n\r\n").as_bytes());
        let value = cookie_value(&fields, "session")?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    #[test]
    fn a_query_key_is_read_as_any_upstream_would_read_it() {
        for (text, expected) in [
            ("key=abc", Some("abc")),
            ("k%65y=%61bc", Some("abc")),
            ("key=a+b%20c", Some("a b c")),
            ("key=%u0041bc", Some("Abc")),
            ("key=%zz%4%u12", Some("%zz%4%u12")),
            ("x=1;key=abc", Some("abc")),
            ("key=", None),
            ("key= ", None),
            ("key", None),
            // Quotes are the value to a query parser: only cookies are unquoted.
            ("key=\"\"", Some("\"\"")),
            ("other=key", None),
        ] {
            assert_eq!(query(text), Ok(expected.map(str::to_string)), "{text}");
        }
        for text in [
            "key=a&key=b",
            "key=a;key=b",
            "key=a&k%65y=b",
            "key=&key=b",
            "key&key=b",
        ] {
            assert_eq!(query(text), Err(Repeated), "{text}");
        }
    }

    #[test]
    fn a_cookie_is_read_as_any_upstream_would_read_it() {
        for (lines, expected) in [
            ("Cookie: session=abc", Some("abc")),
            ("Cookie: a=1; session=abc; b=2", Some("abc")),
            ("Cookie: a=1, session=abc", Some("abc")),
            ("Cookie: session=\"abc\"", Some("abc")),
            ("Cookie: session=\"\\101b\\\"c\"", Some("Ab\"c")),
            ("Cookie: session=%61bc", Some("abc")),
            ("Cookie: s%65ssion=abc", Some("abc")),
            ("Cookie: session=a+b", Some("a+b")),
            ("Cookie: session=abc; t=\u{e9}", Some("abc")),
            ("Cookie: session=", None),
            ("Cookie: session=\"\"", None),
            ("Cookie: session= \"\" ", None),
            ("Cookie: session=%22%22", None),
            ("Cookie: session=\"x\"", Some("x")),
            ("Cookie: session=\"", Some("\"")),
            ("Cookie: session=\" \"", Some(" ")),
            ("Cookie: sessions=abc", None),
        ] {
            assert_eq!(cookie(lines), Ok(expected.map(str::to_string)), "{lines}");
        }
        for lines in [
            "Cookie: session=a; session=b",
            "Cookie: session=a\r\nCookie: session=b",
            "Cookie: session=a, session=b",
            "Cookie: session=a; s%65ssion=b",
            "Cookie: session=\"\"; session=b",
        ] {
            assert_eq!(cookie(lines), Err(Repeated), "{lines}");
        }
    }
}
