//! The usage numbers a limit is settled by, read from an upstream answer as it streams to the
//! client (`charge = { reserve = 1000, settle = "json:usage.total_tokens" }`). A leaf codec of
//! upstream bytes, like `http1/`: it imports nothing of the gateway. It only observes the
//! chunks it is shown; it never copies the body, holds a fixed amount of state per answer and
//! cannot panic or recurse on any input.
//!
//! # How the usage is read
//!
//! - **Fields.** Each field is a path of object keys, `usage.total_tokens`; with several
//!   (`["json:usage.input_tokens", "json:usage.output_tokens"]`, at most 8) their values are
//!   summed. Paths go through objects only (no array indexes); a key of a path is compared
//!   byte for byte, case-sensitively, with the document's keys once their escapes are read
//!   (`"us\u0061ge"` is `usage`). A path has at most 8 keys of at most 128 bytes each.
//! - **Values.** A field's value must be a JSON number written with digits only (`12`, `0`)
//!   that fits in 64 bits. Anything else at the path (`-1`, `1.5`, `1e3`, `12.0`, a number
//!   over 18446744073709551615, a string, `null`, `true`, an object, an array) makes the
//!   result `invalid`, and so does a sum over 64 bits.
//! - **Duplicate keys.** Of two equal keys in one object the last wins, as JavaScript's
//!   `JSON.parse` has it: `{"usage": {...}, "usage": null}` has no `usage.total_tokens`.
//! - **JSON bodies** (`application/json`, any `application/*+json`, with any parameters):
//!   one JSON document, with whitespace around it. A syntax error anywhere, or anything but
//!   whitespace after the document, is `malformed`; more than 128 nested arrays and objects
//!   is `too_large`, and so is a body over 16 MiB, which is not examined past that. Either
//!   is reported before any field is looked at: the reservation stands.
//! - **Strings are skipped, not read.** Outside strings the grammar of RFC 8259 is checked
//!   whole; inside them only the escapes (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`,
//!   `\u` and four hex digits). That the bytes are UTF-8, that no raw control character is
//!   there and that `\u` surrogates pair up are not checked: such strings are read as if
//!   they were fine (`JSON.parse` too accepts lone surrogates). A key with a lone surrogate
//!   names no path.
//! - **Event streams** (`text/event-stream`), read as the WHATWG HTML standard's "server-sent
//!   events" say: lines end with CRLF, LF or CR; a leading BOM is dropped; lines starting
//!   with `:` are comments; only `data` fields are read (one space after the colon dropped),
//!   the data lines of an event joined with "\n"; a blank line dispatches the event. Each
//!   dispatched event's data is one JSON document as above, and a field's value is the one
//!   of the last event that held the field (OpenAI's last chunk holds `usage`; Anthropic's
//!   `message_delta` holds `usage.output_tokens`). An event whose data is not JSON (OpenAI's
//!   `[DONE]`) or is malformed holds no field and is no error; an event not dispatched when
//!   the stream ends is dropped. An event with more than 1 MiB of data or more than 128
//!   nested arrays and objects is skipped; the stream itself has no length limit.
//! - **The result**, once the body has ended: `invalid` if a field's value is invalid (for a
//!   stream: its value in the last event that held it); else `too_large` if an event of the
//!   stream was skipped (it may have held a later value than those read); else `missing` if
//!   a field has no value; else the sum.
//! - **Headers** (`settle = "header:x-usage-tokens"`): ASCII digits with optional spaces or
//!   tabs around them, at most 20 digits and within 64 bits; anything else is `invalid`.

mod fields;
mod json;
mod sse;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use fields::UsageFields;

use json::JsonScan;
use sse::EventStream;

/// How much of a body is examined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    /// Arrays and objects nested deeper than this are `TooLarge` (at most 128).
    pub(crate) depth: u8,
    /// A JSON body longer than this is `TooLarge`.
    pub(crate) document_bytes: usize,
    /// A stream's event with more data than this (its lines' joining "\n"s included) is
    /// skipped.
    pub(crate) event_bytes: usize,
}

impl Caps {
    /// The caps in service, the ones the module's documentation names.
    pub(crate) const DEFAULT: Caps = Caps {
        depth: json::DEEPEST,
        document_bytes: 16 << 20,
        event_bytes: 1 << 20,
    };
}

/// Why an answer settles nothing: its reservation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    #[error("a usage field is not in the answer")]
    Missing,
    #[error("a usage field is not a non-negative integer within 64 bits, or their sum is not")]
    Invalid,
    #[error("the answer is too large or too deeply nested to read its usage")]
    TooLarge,
    #[error("the answer's body is not well-formed JSON")]
    Malformed,
}

/// What a field was found to be so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Absent,
    Integer(u64),
    Invalid,
}

/// How an answer's body is read for its usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// One JSON document.
    Json,
    /// Server-sent events, each event's data a JSON document.
    EventStream,
}

impl BodyFormat {
    /// The format of a `Content-Type` value, or `None` when its usage cannot be read:
    /// `application/json`, `application/*+json` or `text/event-stream`, in any case, with
    /// any parameters.
    pub fn of_content_type(value: &[u8]) -> Option<BodyFormat> {
        let essence = value.split(|&b| b == b';').next().unwrap_or_default();
        let essence = trim_ows(essence);
        let slash = essence.iter().position(|&b| b == b'/')?;
        let (kind, subtype) = (&essence[..slash], &essence[slash + 1..]);
        if !is_token(kind) || !is_token(subtype) {
            return None;
        }
        let suffix = b"+json";
        let json_suffix = subtype.len() > suffix.len()
            && subtype[subtype.len() - suffix.len()..].eq_ignore_ascii_case(suffix);
        if kind.eq_ignore_ascii_case(b"text") && subtype.eq_ignore_ascii_case(b"event-stream") {
            Some(BodyFormat::EventStream)
        } else if kind.eq_ignore_ascii_case(b"application")
            && (subtype.eq_ignore_ascii_case(b"json") || json_suffix)
        {
            Some(BodyFormat::Json)
        } else {
            None
        }
    }
}

/// One answer's usage, read from its body as it passes.
#[derive(Debug, Clone)]
pub struct UsageScanner {
    fields: Arc<UsageFields>,
    body: Body,
}

#[derive(Debug, Clone)]
enum Body {
    /// A JSON document and how many more of its bytes are examined.
    Json {
        scan: JsonScan,
        left: usize,
    },
    EventStream(EventStream),
}

impl UsageScanner {
    /// A scanner for one answer, with the caps in service.
    pub fn new(fields: &Arc<UsageFields>, format: BodyFormat) -> UsageScanner {
        UsageScanner::with_caps(fields, format, Caps::DEFAULT)
    }

    /// A scanner with other caps, so that tests reach them with small inputs.
    pub(crate) fn with_caps(
        fields: &Arc<UsageFields>,
        format: BodyFormat,
        caps: Caps,
    ) -> UsageScanner {
        let body = match format {
            BodyFormat::Json => Body::Json {
                scan: JsonScan::new(fields, caps.depth),
                left: caps.document_bytes,
            },
            BodyFormat::EventStream => Body::EventStream(EventStream::new(fields, caps)),
        };
        UsageScanner {
            fields: Arc::clone(fields),
            body,
        }
    }

    /// The body's next bytes, as they are forwarded. Any split of a body gives the same result.
    pub fn feed(&mut self, chunk: &[u8]) {
        match &mut self.body {
            Body::Json { scan, left } => {
                let examined = chunk.len().min(*left);
                scan.feed(&self.fields, &chunk[..examined]);
                *left -= examined;
                if examined < chunk.len() {
                    scan.too_large();
                }
            }
            Body::EventStream(stream) => stream.feed(&self.fields, chunk),
        }
    }

    /// The body ended whole: the sum of the fields' values.
    pub fn finish(self) -> Result<u64, UsageError> {
        let count = self.fields.len();
        match self.body {
            Body::Json { scan, .. } => total(&scan.end()?[..count], UsageError::Missing),
            Body::EventStream(stream) => {
                let (values, skipped) = stream.end();
                stream_total(&values[..count], skipped)
            }
        }
    }
}

/// A stream's sum: `Invalid` first; then, when an event was skipped, `TooLarge` whatever the
/// other events held (the skipped one may have held a later value); then the sum, or `Missing`.
fn stream_total(values: &[Found], skipped: bool) -> Result<u64, UsageError> {
    match total(values, UsageError::Missing) {
        Err(UsageError::Invalid) => Err(UsageError::Invalid),
        _ if skipped => Err(UsageError::TooLarge),
        other => other,
    }
}

/// The sum of `values`: `Invalid` first, then `absent` for a field without a value.
fn total(values: &[Found], absent: UsageError) -> Result<u64, UsageError> {
    if values.contains(&Found::Invalid) {
        return Err(UsageError::Invalid);
    }
    values.iter().try_fold(0u64, |sum, value| match value {
        Found::Integer(n) => sum.checked_add(*n).ok_or(UsageError::Invalid),
        Found::Absent => Err(absent),
        Found::Invalid => Err(UsageError::Invalid),
    })
}

/// A usage header's value: digits, with optional spaces and tabs (OWS) around them.
pub(crate) fn parse_header_value(value: &[u8]) -> Result<u64, UsageError> {
    let digits = trim_ows(value);
    if digits.is_empty() || digits.len() > 20 {
        return Err(UsageError::Invalid);
    }
    digits
        .iter()
        .try_fold(0u64, |n, &b| {
            let digit = b.is_ascii_digit().then(|| u64::from(b - b'0'))?;
            n.checked_mul(10)?.checked_add(digit)
        })
        .ok_or(UsageError::Invalid)
}

/// `value` without the spaces and tabs around it (RFC 9110 §5.6.3).
fn trim_ows(value: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !ows(b))
        .map_or(start, |end| end + 1);
    value.get(start..end).unwrap_or_default()
}

/// A token of RFC 9110 §5.6.2, not empty.
fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
