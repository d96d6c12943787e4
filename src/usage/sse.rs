//! A `text/event-stream` read as it streams (WHATWG HTML, "Parsing an event stream"): lines
//! split on CRLF, LF or CR, a leading BOM dropped, comments and fields other than `data`
//! ignored, an event's data lines streamed through one `JsonScan` joined by "\n" (JSON
//! whitespace), and the event's fields kept only when a blank line dispatches it. No line is
//! buffered: a field name is matched against `data` as it passes, and data is skipped in bulk
//! to the next line end once its event is over the cap.

use super::fields::{MAX_FIELDS, UsageFields};
use super::json::JsonScan;
use super::{Caps, Found, UsageError};

const BOM: &[u8] = b"\xEF\xBB\xBF";
const DATA: &[u8] = b"data";

/// Where the stream is in a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Nothing of the line yet.
    Start,
    /// In the field name: how many bytes of it equal `data`'s so far (`None` once it is
    /// another name).
    Name(Option<usize>),
    /// Right after `data:`: a space here is dropped.
    DataStart,
    /// In a `data` value.
    Data,
    /// In a comment or another field's line.
    Skip,
}

/// The event being read.
#[derive(Debug, Clone)]
struct Event {
    scan: JsonScan,
    /// Data bytes so far, the joining "\n"s included.
    len: usize,
    has_data: bool,
    /// Over the per-event cap: skipped.
    oversized: bool,
}

impl Event {
    fn new(fields: &UsageFields, caps: &Caps) -> Event {
        Event {
            scan: JsonScan::new(fields, caps.depth),
            len: 0,
            has_data: false,
            oversized: false,
        }
    }

    fn data(&mut self, fields: &UsageFields, bytes: &[u8], cap: usize) {
        if self.oversized {
            return;
        }
        match self.len.checked_add(bytes.len()) {
            Some(len) if len <= cap => {
                self.len = len;
                self.scan.feed(fields, bytes);
            }
            _ => self.oversized = true,
        }
    }
}

/// One stream's scan: each field's value in the last dispatched event that carried it.
#[derive(Debug, Clone)]
pub(super) struct EventStream {
    caps: Caps,
    /// Bytes of a BOM matched at the stream's start; `None` once past it.
    bom: Option<usize>,
    line: Line,
    /// The last byte was a CR: an LF now ends no other line.
    after_cr: bool,
    event: Event,
    /// An event was dispatched over a cap, so a field it held may be missing.
    skipped: bool,
    values: [Found; MAX_FIELDS],
}

impl EventStream {
    pub(super) fn new(fields: &UsageFields, caps: Caps) -> EventStream {
        EventStream {
            caps,
            bom: Some(0),
            line: Line::Start,
            after_cr: false,
            event: Event::new(fields, &caps),
            skipped: false,
            values: [Found::Absent; MAX_FIELDS],
        }
    }

    pub(super) fn feed(&mut self, fields: &UsageFields, mut bytes: &[u8]) {
        while let Some(matched) = self.bom {
            let Some((&byte, rest)) = bytes.split_first() else {
                return;
            };
            if BOM.get(matched) == Some(&byte) {
                bytes = rest;
                self.bom = Some(matched + 1).filter(|&m| m < BOM.len());
            } else {
                // Not a BOM after all: what was taken for one is the first line's.
                self.bom = None;
                self.lines(fields, BOM.get(..matched).unwrap_or_default());
            }
        }
        self.lines(fields, bytes);
    }

    /// The stream ended: an event not dispatched is dropped, as the spec says. Also whether an
    /// event was skipped (too large), which may have held a later value.
    pub(super) fn end(&self) -> (&[Found], bool) {
        (&self.values, self.skipped)
    }

    fn lines(&mut self, fields: &UsageFields, bytes: &[u8]) {
        let mut at = 0;
        while let Some(&byte) = bytes.get(at) {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                at += 1;
                continue;
            }
            if byte == b'\r' || byte == b'\n' {
                self.line_end(fields);
                self.after_cr = byte == b'\r';
                at += 1;
                continue;
            }
            match self.line {
                Line::Data | Line::Skip => {
                    let rest = &bytes[at..];
                    let end = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
                    if self.line == Line::Data {
                        self.event.data(fields, &rest[..end], self.caps.event_bytes);
                    }
                    at += end;
                }
                _ => at += usize::from(self.line_byte(fields, byte)),
            }
        }
    }

    /// A byte of a line before its value; whether it was consumed (the value's first byte
    /// is read again as data).
    fn line_byte(&mut self, fields: &UsageFields, byte: u8) -> bool {
        self.line = match (self.line, byte) {
            (Line::Start, b':') => Line::Skip,
            (Line::Start, _) => Line::Name(name_step(Some(0), byte)),
            (Line::Name(Some(n)), b':') if n == DATA.len() => {
                self.begin_data(fields);
                Line::DataStart
            }
            (Line::Name(_), b':') => Line::Skip,
            (Line::Name(name), _) => Line::Name(name_step(name, byte)),
            (Line::DataStart, _) => {
                self.line = Line::Data;
                return byte == b' ';
            }
            (line @ (Line::Data | Line::Skip), _) => line,
        };
        true
    }

    fn line_end(&mut self, fields: &UsageFields) {
        match self.line {
            Line::Start => self.dispatch(fields),
            // `data` alone: a data line with an empty value.
            Line::Name(Some(n)) if n == DATA.len() => self.begin_data(fields),
            _ => {}
        }
        self.line = Line::Start;
    }

    /// A data line starts: after another of the same event, the "\n" that joins them.
    fn begin_data(&mut self, fields: &UsageFields) {
        if self.event.has_data {
            self.event.data(fields, b"\n", self.caps.event_bytes);
        }
        self.event.has_data = true;
    }

    /// A blank line: the event's fields replace those of earlier events. An event with no
    /// data, whose data is not JSON (`[DONE]`) or is malformed carries none.
    fn dispatch(&mut self, fields: &UsageFields) {
        if !self.event.has_data {
            return;
        }
        let event = std::mem::replace(&mut self.event, Event::new(fields, &self.caps));
        if event.oversized {
            self.skipped = true;
            return;
        }
        match event.scan.end() {
            Ok(found) => {
                for (value, found) in self.values.iter_mut().zip(found) {
                    if found != Found::Absent {
                        *value = found;
                    }
                }
            }
            Err(UsageError::TooLarge) => self.skipped = true,
            Err(_) => {}
        }
    }
}

/// The field name after one more byte: still `data`'s bytes so far, or another name.
fn name_step(name: Option<usize>, byte: u8) -> Option<usize> {
    name.filter(|&n| DATA.get(n) == Some(&byte)).map(|n| n + 1)
}
