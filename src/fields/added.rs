//! The fields the gateway adds to an answer's head on every request: `X-Request-Id`, the
//! rate-limit fields and a 429's `Retry-After`. They are written once, as the head lines they
//! become: the gateway's own HTTP/1.1 server copies the lines into the head, and only hyper
//! (HTTP/2, connections handed to it) gets them as header map entries. Inserting them into
//! the header map (each custom name hashed byte by byte, an entry made and later dropped) was
//! one of the larger costs of a request under limits.
//!
//! Each replaces a field of the same name from the upstream, as an insert would.

use std::cell::Cell;
use std::ops::Range;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::rt::spare;

/// A field the gateway adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    RequestId,
    RetryAfter,
    XRateLimitLimit,
    XRateLimitRemaining,
    XRateLimitReset,
    RateLimitPolicy,
    RateLimit,
}

const COUNT: usize = 7;

/// Room for every field of a request limited by a few windows.
const LINES_CAPACITY: usize = 512;

thread_local! {
    /// An emptied buffer of lines for this thread's next answer (`spare`).
    static SPARE_LINES: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

impl Added {
    /// For hyper's path, where the fields go into the header map.
    pub(crate) fn name(self) -> HeaderName {
        HeaderName::from_static(self.name_text())
    }

    fn name_bytes(self) -> &'static [u8] {
        self.name_text().as_bytes()
    }

    /// The field named `name`, in any case. Asked for every field of every response: most
    /// names are told apart by their first byte.
    pub(crate) fn named(name: &[u8]) -> Option<Added> {
        if !matches!(name.first(), Some(b'x' | b'X' | b'r' | b'R')) {
            return None;
        }
        Added::ALL
            .into_iter()
            .find(|field| name.eq_ignore_ascii_case(field.name_bytes()))
    }

    /// This field's bit in a set of fields (`AddedFields::present`, `UpstreamFields`).
    pub(crate) fn bit(self) -> u8 {
        1 << self as u8
    }

    fn name_text(self) -> &'static str {
        match self {
            Added::RequestId => "x-request-id",
            Added::RetryAfter => "retry-after",
            Added::XRateLimitLimit => "x-ratelimit-limit",
            Added::XRateLimitRemaining => "x-ratelimit-remaining",
            Added::XRateLimitReset => "x-ratelimit-reset",
            Added::RateLimitPolicy => "ratelimit-policy",
            Added::RateLimit => "ratelimit",
        }
    }

    const ALL: [Added; COUNT] = [
        Added::RequestId,
        Added::RetryAfter,
        Added::XRateLimitLimit,
        Added::XRateLimitRemaining,
        Added::XRateLimitReset,
        Added::RateLimitPolicy,
        Added::RateLimit,
    ];
}

/// Head lines (`name: value\r\n`), at most one per `Added`; a field added again replaces the
/// first. Kept small (it travels in every response body): which fields are present is a bit
/// each, and a value is found by reading the lines.
#[derive(Debug, Default)]
pub(crate) struct AddedFields {
    lines: Vec<u8>,
    present: u8,
}

impl Drop for AddedFields {
    fn drop(&mut self) {
        spare::keep(&SPARE_LINES, &mut self.lines, LINES_CAPACITY);
    }
}

impl AddedFields {
    #[cfg(test)]
    /// Adds `field` with the value `write` appends. A value that is not a valid field value
    /// (a control character) is left out rather than sent broken.
    pub(crate) fn add(&mut self, field: Added, write: impl FnOnce(&mut Vec<u8>)) {
        self.add_line(field, write, has_control);
    }

    /// Adds `field` with a value made only of parts that hold no control character: digits,
    /// limit names (printable ASCII, checked as the config is loaded) and `HeaderValue`s.
    /// Not checked again here (debug builds assert it): testing every byte of the rate-limit
    /// fields again, on every request under limits, would repeat checks their parts passed.
    pub(crate) fn add_composed(&mut self, field: Added, write: impl FnOnce(&mut Vec<u8>)) {
        self.add_line(field, write, |value| {
            debug_assert!(!has_control(value), "{field:?}: {value:?}");
            false
        });
    }

    fn add_line(
        &mut self,
        field: Added,
        write: impl FnOnce(&mut Vec<u8>),
        invalid: impl FnOnce(&[u8]) -> bool,
    ) {
        if self.has(field) {
            self.remove(field);
        }
        let line_start = self.lines.len();
        if self.lines.capacity() == 0 {
            self.lines = spare::take(&SPARE_LINES, LINES_CAPACITY);
        }
        self.lines.extend_from_slice(field.name_bytes());
        self.lines.extend_from_slice(b": ");
        let value_start = self.lines.len();
        write(&mut self.lines);
        let value = &self.lines[value_start..];
        if value.is_empty() || invalid(value) {
            self.lines.truncate(line_start);
            return;
        }
        self.lines.extend_from_slice(b"\r\n");
        self.present |= field.bit();
    }

    /// Adds `field` with `value` as it is.
    #[cfg(test)]
    pub(crate) fn add_value(&mut self, field: Added, value: &[u8]) {
        self.add(field, |out| out.extend_from_slice(value));
    }

    fn has(&self, field: Added) -> bool {
        self.present & field.bit() != 0
    }

    /// True when any field of the set `fields` (a bit each, see `Added::bit`) is added here.
    pub(crate) fn has_any(&self, fields: u8) -> bool {
        self.present & fields != 0
    }

    /// Each line's field, the line's range and the value's.
    fn entries(&self) -> impl Iterator<Item = (Added, Range<usize>, Range<usize>)> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let rest = self.lines.get(at..).filter(|rest| !rest.is_empty())?;
            let field = *Added::ALL.iter().find(|field| {
                let name = field.name_bytes();
                rest.starts_with(name) && rest[name.len()..].starts_with(b": ")
            })?;
            let value_start = at + field.name_bytes().len() + 2;
            let end = at + rest.windows(2).position(|pair| pair == b"\r\n")?;
            let line = at..end + 2;
            at = end + 2;
            Some((field, line, value_start..end))
        })
    }

    fn remove(&mut self, field: Added) {
        let line = self
            .entries()
            .find(|(f, _, _)| *f == field)
            .map(|(_, line, _)| line);
        if let Some(line) = line {
            self.lines.drain(line);
        }
        self.present &= !field.bit();
    }

    /// The lines, for a head being written.
    pub(crate) fn lines(&self) -> &[u8] {
        &self.lines
    }

    /// The value of `field`, if added (for tests: heads are written from `lines`).
    #[cfg(test)]
    fn get(&self, field: Added) -> Option<&[u8]> {
        let (_, _, value) = self.entries().find(|(f, _, _)| *f == field)?;
        Some(&self.lines[value])
    }

    /// True when `name` (in any case) is a field added here, which the upstream's field of
    /// that name yields to.
    pub(crate) fn replaces(&self, name: &[u8]) -> bool {
        self.present != 0 && Added::named(name).is_some_and(|field| self.has(field))
    }

    /// Moves the fields into `headers`, replacing those of the same names.
    pub(crate) fn move_into(&mut self, headers: &mut HeaderMap) {
        for (field, _, value) in self.entries() {
            if let Ok(value) = HeaderValue::from_bytes(&self.lines[value]) {
                headers.insert(field.name(), value);
            }
        }
        *self = AddedFields::default();
    }
}

/// A control character other than tab, which a field value must not hold (a CR or LF would
/// end the field). Every byte is tested, with no early exit, which compiles to a few vector
/// instructions. (Eight bytes at a time by bit tricks measured no cheaper: values are short.)
fn has_control(value: &[u8]) -> bool {
    value.iter().fold(false, |found, &b| found | is_control(b))
}

fn is_control(byte: u8) -> bool {
    (byte < 0x20 && byte != b'\t') | (byte == 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::id::X_REQUEST_ID;
    use http::header::RETRY_AFTER;

    #[test]
    fn an_answers_buffer_serves_the_next_answer_on_its_thread_emptied() {
        let spare_capacity = || spare::capacity_in(&SPARE_LINES);
        let mut first = AddedFields::default();
        first.add_value(Added::RetryAfter, b"5");
        assert_eq!(spare_capacity(), 0);
        drop(first);
        assert_eq!(spare_capacity(), LINES_CAPACITY);
        let mut next = AddedFields::default();
        next.add_value(Added::RequestId, b"abc");
        assert_eq!(spare_capacity(), 0, "taken by the next answer");
        assert_eq!(next.lines(), b"x-request-id: abc\r\n");
        assert!(next.has(Added::RequestId) && !next.has(Added::RetryAfter));
        drop(next);

        // One grown by a long field is not kept: the spare stays small.
        let mut long = AddedFields::default();
        long.add_value(Added::RequestId, &[b'a'; 600]);
        drop(long);
        assert_eq!(spare_capacity(), 0);
    }

    #[test]
    fn fields_are_head_lines_and_replace_the_upstreams() {
        let mut added = AddedFields::default();
        added.add_value(Added::RateLimit, b"\"a\";r=1");
        added.add_value(Added::RateLimitPolicy, b"\"a\";q=2;w=1");
        added.add_value(Added::RateLimit, b"\"a\";r=0");
        assert_eq!(added.get(Added::RateLimit), Some(&b"\"a\";r=0"[..]));
        assert_eq!(
            added.get(Added::RateLimitPolicy),
            Some(&b"\"a\";q=2;w=1"[..])
        );
        let mut added = AddedFields::default();
        added.add_value(Added::RequestId, b"abc");
        added.add(Added::RetryAfter, |out| out.extend_from_slice(b"5"));
        added.add_value(Added::RateLimit, b"bad\r\nvalue");
        added.add_value(Added::XRateLimitLimit, b"");
        added.add_value(Added::XRateLimitReset, b"del\x7f");
        assert_eq!(added.lines(), b"x-request-id: abc\r\nretry-after: 5\r\n");
        assert!(added.replaces(X_REQUEST_ID.as_str().as_bytes()));
        assert!(added.replaces(b"X-Request-ID"));
        assert!(!added.replaces(b"x-request-i"));
        assert!(!added.replaces(Added::RateLimit.name_bytes()));
        assert!(!added.replaces(b"content-type"));
        assert!(added.replaces(RETRY_AFTER.as_str().as_bytes()));
        assert!(added.has_any(Added::RetryAfter.bit() | Added::RateLimit.bit()));
        assert!(!added.has_any(Added::RateLimit.bit()));

        // Added again: the first is replaced, the others keep their values.
        added.add_value(Added::RequestId, b"xyz");
        assert_eq!(added.lines(), b"retry-after: 5\r\nx-request-id: xyz\r\n");
        assert_eq!(added.get(Added::RetryAfter), Some(&b"5"[..]));
        assert_eq!(added.get(Added::RequestId), Some(&b"xyz"[..]));

        let mut headers = HeaderMap::new();
        headers.insert(X_REQUEST_ID, HeaderValue::from_static("from-upstream"));
        headers.insert("other", HeaderValue::from_static("kept"));
        added.move_into(&mut headers);
        assert_eq!(headers["x-request-id"], "xyz");
        assert_eq!(headers.get_all("x-request-id").iter().count(), 1);
        assert_eq!(headers["retry-after"], "5");
        assert_eq!(headers["other"], "kept");
        assert!(added.lines().is_empty());
    }

    #[test]
    fn composed_values_are_added_and_replaced_as_checked_ones() {
        let mut added = AddedFields::default();
        added.add_composed(Added::RateLimit, |out| out.extend_from_slice(b"\"a\";r=1"));
        added.add_composed(Added::XRateLimitLimit, |_| {});
        added.add_composed(Added::RateLimit, |out| out.extend_from_slice(b"\"a\";r=0"));
        assert_eq!(added.lines(), b"ratelimit: \"a\";r=0\r\n");
    }

    /// What the callers promise is checked where it costs nothing: in debug builds.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "RateLimit")]
    fn a_composed_value_with_a_control_character_is_a_bug() {
        let mut added = AddedFields::default();
        added.add_composed(Added::RateLimit, |out| out.extend_from_slice(b"a\r\nb"));
    }

    #[test]
    fn each_field_is_named_as_the_gateway_names_it_elsewhere() {
        for field in Added::ALL {
            assert_eq!(field.name().as_str().as_bytes(), field.name_bytes());
            assert_eq!(Added::named(field.name_bytes()), Some(field));
            let shouted = field.name_text().to_ascii_uppercase();
            assert_eq!(Added::named(shouted.as_bytes()), Some(field));
        }
        assert_eq!(Added::named(b"ratelimits"), None);
        assert_eq!(Added::named(b""), None);
        assert_eq!(Added::RequestId.name(), X_REQUEST_ID);
        assert_eq!(Added::RetryAfter.name(), RETRY_AFTER);
    }

    proptest::proptest! {
        #[test]
        fn a_control_is_found_wherever_it_is(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            plain in "[ -~\t]{0,40}",
        ) {
            let byte_by_byte = |v: &[u8]| v.iter().any(|&b| is_control(b));
            proptest::prop_assert_eq!(has_control(&value), byte_by_byte(&value));
            proptest::prop_assert!(!has_control(plain.as_bytes()));
            for at in 0..=plain.len() {
                for control in [0u8, b'\r', b'\n', 0x1f, 0x7f] {
                    let mut with = plain.as_bytes().to_vec();
                    with.insert(at, control);
                    proptest::prop_assert!(has_control(&with));
                }
            }
        }
    }
}
