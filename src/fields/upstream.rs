//! An upstream response's end-to-end fields, kept as the head lines the client gets. The
//! HTTP/1.1 client reads them into these lines instead of a header map: the gateway's own
//! server copies the lines into its head in one piece, and only hyper's HTTP/2 server parses
//! them into a map. Building, hashing and dropping the
//! map was one of the larger costs of a proxied request (docs/PERFORMANCE.md, "Design
//! decisions that keep it fast").
//!
//! Names keep the upstream's spelling (field names are case-insensitive; nginx passes them on
//! as they come too).

use std::cell::Cell;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::fields::added::{Added, AddedFields};
use crate::http1::encode::encode_field;
use crate::http1::response_head::ResponseFields;
use crate::rt::spare;

/// Above any Content-Length accepted (18 digits at most).
const NO_LENGTH: u64 = u64::MAX;
/// Lines of a usual response head fit: a buffer of this size serves one answer after another.
const LINES_CAPACITY: usize = 512;
/// The largest buffer kept for the next answer (`spare`).
const MAX_SPARE_CAPACITY: usize = 4096;

thread_local! {
    /// An emptied buffer of lines for this thread's next answer (`spare`).
    static SPARE_LINES: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

#[derive(Debug)]
pub(crate) struct UpstreamFields {
    /// `name: value\r\n` lines in the upstream's order, less hop-by-hop and framing fields.
    lines: Vec<u8>,
    /// The upstream's valid Content-Length, unless Transfer-Encoding overrode it; `NO_LENGTH`
    /// for none (kept small: every response body carries these fields). A body's framing is
    /// the server's to write; a 304's or a HEAD answer's length is passed on.
    content_length: u64,
    /// The `Added` fields the upstream sent too, a bit each: the gateway's replace them.
    named_as_added: u8,
    has_date: bool,
}

impl Default for UpstreamFields {
    fn default() -> UpstreamFields {
        UpstreamFields {
            lines: Vec::new(),
            content_length: NO_LENGTH,
            named_as_added: 0,
            has_date: false,
        }
    }
}

impl Drop for UpstreamFields {
    fn drop(&mut self) {
        spare::keep(&SPARE_LINES, &mut self.lines, MAX_SPARE_CAPACITY);
    }
}

impl UpstreamFields {
    /// Room for `bytes` of lines.
    pub(crate) fn with_capacity(bytes: usize) -> UpstreamFields {
        UpstreamFields {
            lines: spare::take(&SPARE_LINES, bytes.max(LINES_CAPACITY)),
            ..UpstreamFields::default()
        }
    }

    /// Appends a field. `name` must be a token and `value` a valid field value (no CR, LF or
    /// other control but tab), as httparse checks them.
    pub(crate) fn push(&mut self, name: &[u8], value: &[u8]) {
        debug_assert!(!name.is_empty() && !name.contains(&b':'));
        debug_assert!(!value.iter().any(|&b| b == b'\r' || b == b'\n'));
        if let Some(field) = Added::named(name) {
            self.named_as_added |= field.bit();
        } else if name.eq_ignore_ascii_case(b"date") {
            self.has_date = true;
        }
        encode_field(&mut self.lines, name, value);
    }

    /// Keeps only the fields whose names `keep` accepts.
    pub(crate) fn retain(&mut self, keep: impl Fn(&[u8]) -> bool) {
        let mut kept = UpstreamFields::with_capacity(self.lines.len());
        for (name, value) in self.iter().filter(|(name, _)| keep(name)) {
            kept.push(name, value);
        }
        kept.content_length = self.content_length;
        *self = kept;
    }

    /// Every parsed length is under `NO_LENGTH` (18 digits at most), which would count as none.
    pub(crate) fn set_content_length(&mut self, length: Option<u64>) {
        self.content_length = length.unwrap_or(NO_LENGTH);
    }

    pub(crate) fn content_length(&self) -> Option<u64> {
        (self.content_length != NO_LENGTH).then_some(self.content_length)
    }

    pub(crate) fn has_date(&self) -> bool {
        self.has_date
    }

    /// Each field's name and value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.lines
            .split(|&b| b == b'\n')
            .filter_map(|line| line.strip_suffix(b"\r"))
            .filter_map(|line| {
                let colon = line.iter().position(|&b| b == b':')?;
                let value = line[colon + 1..].strip_prefix(b" ")?;
                Some((&line[..colon], value))
            })
    }

    /// Writes the lines into a head, less those that fields the gateway adds replace.
    pub(crate) fn write_lines(&self, out: &mut Vec<u8>, added: &AddedFields) {
        if !added.has_any(self.named_as_added) {
            out.extend_from_slice(&self.lines);
            return;
        }
        for (name, value) in self.iter() {
            if !added.replaces(name) {
                encode_field(out, name, value);
            }
        }
    }

    /// Moves the fields, and the Content-Length, into `headers`, for a server that writes
    /// heads from a header map alone (hyper).
    pub(crate) fn move_into(&mut self, headers: &mut HeaderMap) {
        headers.reserve(self.lines.len() / 24 + 1);
        for (name, value) in self.iter() {
            // Checked by httparse already: neither conversion fails.
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            {
                headers.append(name, value);
            }
        }
        if let Some(length) = self.content_length() {
            headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        *self = UpstreamFields::default();
    }
}

/// The upstream client's response head parser fills these as it reads a head.
impl ResponseFields for UpstreamFields {
    #[inline]
    fn with_capacity(head_length: usize) -> UpstreamFields {
        UpstreamFields::with_capacity(head_length)
    }

    #[inline]
    fn push(&mut self, name: &[u8], value: &[u8]) {
        UpstreamFields::push(self, name, value);
    }

    #[inline]
    fn retain(&mut self, keep: impl Fn(&[u8]) -> bool) {
        UpstreamFields::retain(self, keep);
    }

    #[inline]
    fn set_content_length(&mut self, length: Option<u64>) {
        UpstreamFields::set_content_length(self, length);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> UpstreamFields {
        let mut fields = UpstreamFields::with_capacity(64);
        for (name, value) in pairs {
            fields.push(name.as_bytes(), value.as_bytes());
        }
        fields
    }

    fn written(fields: &UpstreamFields, added: &AddedFields) -> String {
        let mut out = Vec::new();
        fields.write_lines(&mut out, added);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn an_answers_lines_serve_the_next_answer_on_its_thread_emptied() {
        let spare_capacity = || spare::capacity_in(&SPARE_LINES);
        let first = fields(&[("server", "echo")]);
        assert_eq!(spare_capacity(), 0);
        drop(first);
        assert_eq!(spare_capacity(), LINES_CAPACITY);
        let next = fields(&[("date", "today")]);
        assert_eq!(spare_capacity(), 0, "taken by the next answer");
        assert_eq!(written(&next, &AddedFields::default()), "date: today\r\n");
        drop(next);
        // One grown past what is kept goes with its answer.
        let large = fields(&[("x-large", &"a".repeat(MAX_SPARE_CAPACITY))]);
        drop(large);
        assert_eq!(spare_capacity(), 0);
    }

    #[test]
    fn lines_are_written_as_pushed_less_those_the_gateway_adds() {
        let upstream = fields(&[
            ("Content-Type", "text/plain"),
            ("X-Request-Id", "theirs"),
            ("set-cookie", "a=1"),
            ("x-empty", ""),
            ("set-cookie", "b=2"),
            ("RateLimit", "\"u\";r=1"),
        ]);
        assert!(!upstream.has_date());
        let all = "Content-Type: text/plain\r\nX-Request-Id: theirs\r\nset-cookie: a=1\r\n\
                   x-empty: \r\nset-cookie: b=2\r\nRateLimit: \"u\";r=1\r\n";
        assert_eq!(written(&upstream, &AddedFields::default()), all);
        let mut added = AddedFields::default();
        added.add_value(Added::RetryAfter, b"5");
        assert_eq!(written(&upstream, &added), all);
        added.add_value(Added::RequestId, b"ours");
        assert_eq!(
            written(&upstream, &added),
            "Content-Type: text/plain\r\nset-cookie: a=1\r\nx-empty: \r\nset-cookie: b=2\r\n\
             RateLimit: \"u\";r=1\r\n"
        );
        added.add_value(Added::RateLimit, b"\"g\";r=0");
        assert!(!written(&upstream, &added).contains("RateLimit"));
    }

    #[test]
    fn retained_fields_keep_their_order_and_what_they_tell() {
        let mut upstream = fields(&[
            ("x-hop", "1"),
            ("Date", "Tue, 01 Dec 2026 03:00:00 GMT"),
            ("X-Request-Id", "theirs"),
            ("x-kept", "2"),
        ]);
        upstream.set_content_length(Some(3));
        upstream.retain(|name| !name.eq_ignore_ascii_case(b"X-HOP"));
        let mut added = AddedFields::default();
        added.add_value(Added::RequestId, b"ours");
        assert_eq!(
            written(&upstream, &added),
            "Date: Tue, 01 Dec 2026 03:00:00 GMT\r\nx-kept: 2\r\n"
        );
        assert!(upstream.has_date());
        assert_eq!(upstream.content_length(), Some(3));
        upstream.retain(|name| name != b"Date");
        assert!(!upstream.has_date());
    }

    #[test]
    fn moved_into_a_map_every_value_is_kept_and_the_length_added() {
        let mut upstream = fields(&[
            ("Date", "Tue, 01 Dec 2026 03:00:00 GMT"),
            ("set-cookie", "a=1"),
            ("Set-Cookie", "b=2"),
            ("x-odd", "caf\u{e9}: \"x\"\t"),
        ]);
        upstream.set_content_length(Some(12));
        assert!(upstream.has_date());
        assert_eq!(upstream.iter().count(), 4);
        let mut headers = HeaderMap::new();
        upstream.move_into(&mut headers);
        let cookies: Vec<_> = headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(headers["date"], "Tue, 01 Dec 2026 03:00:00 GMT");
        assert_eq!(headers["x-odd"].as_bytes(), "caf\u{e9}: \"x\"\t".as_bytes());
        assert_eq!(headers["content-length"], "12");
        assert_eq!(headers.len(), 5);
        assert_eq!(upstream.iter().count(), 0);
    }
}
