//! The usage scanner on arbitrary bodies: the result is the same however the body is split,
//! and it is what a reference built on serde_json says.
//!
//! - JSON bodies: where serde_json parses the body (within the caps), the scanner's result
//!   is the lookup of the paths in serde_json's `Value` (whose map keeps the last of duplicate
//!   keys, as the scanner does); where serde_json refuses it, the scanner returns no sum.
//!   Exact in both directions but for what the scanner leaves unchecked inside strings, which
//!   the reference first makes acceptable to serde_json: raw control characters (tab, CR and
//!   LF become spaces, the others `#`, which no path's key holds, so no key changes whether
//!   it matches) and bytes that are not UTF-8 (replaced by U+FFFD). Where serde_json refuses
//!   what the scanner reads on purpose (lone `\u` surrogates, numbers beyond `f64` such as
//!   `1e400`) or only its own depth limit is reached, nothing is compared.
//! - Event streams: a reference splits the whole stream into events by the WHATWG rules and
//!   reads each dispatched event's data as above; the last event holding a field gives it.
//!
//! `bytes`: a selector (bit 0: event stream; bit 1: small caps; bits 2-4: the paths), two
//! piece sizes, then the body.

use std::sync::Arc;

use serde_json::Value;

use crate::usage::{BodyFormat, Caps, UsageError, UsageFields, UsageScanner};

/// Short keys, so that the fuzzer finds them; `é` for a key of more than one byte.
const PATHS: [&[&str]; 8] = [
    &["a"],
    &["a", "b"],
    &["a.b"],
    &["a.b", "c"],
    &["a", "a.b"],
    &["é.a"],
    &["usage.total_tokens"],
    &["usage.input_tokens", "usage.output_tokens"],
];

/// Caps that fuzz inputs reach.
const SMALL: Caps = Caps {
    depth: 3,
    document_bytes: 48,
    event_bytes: 24,
};

pub fn usage_scan(bytes: &[u8]) {
    let [selector, a, b, body @ ..] = bytes else {
        return;
    };
    let format = if selector & 1 == 0 {
        BodyFormat::Json
    } else {
        BodyFormat::EventStream
    };
    let caps = if selector & 2 == 0 {
        Caps::DEFAULT
    } else {
        SMALL
    };
    let paths = PATHS[usize::from(selector >> 2) % PATHS.len()];
    let fields = Arc::new(UsageFields::parse(paths).expect("valid paths"));
    let whole = scan(&fields, format, caps, body, &[body.len().max(1)]);
    let split = scan(
        &fields,
        format,
        caps,
        body,
        &[usize::from(*a) + 1, usize::from(*b) + 1],
    );
    assert_eq!(whole, split, "split in pieces of {a}+1 and {b}+1");
    match format {
        BodyFormat::Json => check_json(body, paths, caps, whole),
        BodyFormat::EventStream => check_stream(body, paths, caps, whole),
    }
}

/// `body` fed in pieces of `pieces` sizes in turn.
fn scan(
    fields: &Arc<UsageFields>,
    format: BodyFormat,
    caps: Caps,
    body: &[u8],
    pieces: &[usize],
) -> Result<u64, UsageError> {
    let mut scanner = UsageScanner::with_caps(fields, format, caps);
    let mut sizes = pieces.iter().cycle();
    let mut rest = body;
    while !rest.is_empty() {
        let n = (*sizes.next().expect("a size")).min(rest.len());
        scanner.feed(&rest[..n]);
        rest = &rest[n..];
    }
    scanner.finish()
}

fn check_json(body: &[u8], paths: &[&str], caps: Caps, ours: Result<u64, UsageError>) {
    if body.len() > caps.document_bytes {
        let expected = match document(body, paths, caps.depth) {
            Document::Values(_) | Document::TooDeep => Some(UsageError::TooLarge),
            _ => None,
        };
        match expected {
            Some(expected) => assert_eq!(ours, Err(expected)),
            None => assert!(
                matches!(ours, Err(UsageError::TooLarge | UsageError::Malformed)),
                "{ours:?}"
            ),
        }
        return;
    }
    match document(body, paths, caps.depth) {
        Document::Values(values) => assert_eq!(ours, total(&values, UsageError::Missing)),
        Document::Malformed => assert_eq!(ours, Err(UsageError::Malformed)),
        Document::TooDeep => assert_eq!(ours, Err(UsageError::TooLarge)),
        Document::MaybeTooDeep => assert!(
            matches!(ours, Err(UsageError::TooLarge | UsageError::Malformed)),
            "{ours:?}"
        ),
        Document::Unknown => {}
    }
}

fn check_stream(body: &[u8], paths: &[&str], caps: Caps, ours: Result<u64, UsageError>) {
    let mut values = vec![Found::Absent; paths.len()];
    let (mut skipped, mut maybe_skipped) = (false, false);
    for data in events(body) {
        if data.len() > caps.event_bytes {
            skipped = true;
            continue;
        }
        match document(&data, paths, caps.depth) {
            Document::Values(found) => {
                for (value, found) in values.iter_mut().zip(found) {
                    if found != Found::Absent {
                        *value = found;
                    }
                }
            }
            Document::Malformed => {}
            Document::TooDeep => skipped = true,
            Document::MaybeTooDeep => maybe_skipped = true,
            Document::Unknown => return,
        }
    }
    // A skipped event may have held a later value: the result is then too_large, unless a
    // value read is invalid.
    let expected = match total(&values, UsageError::Missing) {
        Err(UsageError::Invalid) => Err(UsageError::Invalid),
        _ if skipped => Err(UsageError::TooLarge),
        other => other,
    };
    if maybe_skipped && expected != Err(UsageError::Invalid) {
        assert!(
            ours == expected || ours == Err(UsageError::TooLarge),
            "{ours:?} {expected:?}"
        );
    } else {
        assert_eq!(ours, expected);
    }
}

/// The data of each event a stream dispatches (WHATWG HTML, "Parsing an event stream"),
/// read from the whole stream at once.
fn events(stream: &[u8]) -> Vec<Vec<u8>> {
    let stream = stream.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(stream);
    let mut events = Vec::new();
    let mut data: Vec<u8> = Vec::new();
    let mut rest = stream;
    while let Some(end) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        let line = &rest[..end];
        let crlf = rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n');
        rest = &rest[end + 1 + usize::from(crlf)..];
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                events.push(std::mem::take(&mut data));
            }
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if name == b"data" {
            data.extend_from_slice(value);
            data.push(b'\n');
        }
    }
    events
}

/// What the reference makes of one JSON document.
enum Document {
    /// Each path's value.
    Values(Vec<Found>),
    Malformed,
    /// Nested deeper than the cap.
    TooDeep,
    /// Malformed, with more containers open somewhere than the cap: the scanner may stop at
    /// either.
    MaybeTooDeep,
    /// serde_json refuses what the scanner reads on purpose: no answer.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Absent,
    Integer(u64),
    Invalid,
}

fn document(text: &[u8], paths: &[&str], deepest: u8) -> Document {
    let deeper = most_open(text) > usize::from(deepest);
    match serde_json::from_str::<Value>(&as_serde_reads(text)) {
        Ok(_) if deeper => Document::TooDeep,
        Ok(value) => Document::Values(paths.iter().map(|path| lookup(&value, path)).collect()),
        // serde_json allows 127 containers; the scanner got deeper than its cap first.
        Err(e) if e.to_string().starts_with("recursion limit") && deepest < 127 => {
            Document::TooDeep
        }
        Err(e) if is_leniency(&e.to_string()) => Document::Unknown,
        Err(_) if deeper => Document::MaybeTooDeep,
        Err(_) => Document::Malformed,
    }
}

/// What serde_json refuses and the scanner reads: lone surrogates, numbers beyond `f64`,
/// and more containers than serde_json's limit but fewer than the scanner's.
fn is_leniency(error: &str) -> bool {
    [
        "surrogate",
        "hex escape",
        "number out of range",
        "recursion limit",
    ]
    .iter()
    .any(|class| error.contains(class))
}

/// `text` as serde_json would accept it where the scanner does not look: inside strings.
fn as_serde_reads(text: &[u8]) -> String {
    let mapped: Vec<u8> = (text.iter())
        .map(|&b| match b {
            b'\t' | b'\n' | b'\r' => b' ',
            0..=0x1f => b'#',
            _ => b,
        })
        .collect();
    String::from_utf8_lossy(&mapped).into_owned()
}

/// The most containers open at once outside strings: exact for a JSON document, and for
/// any other text at least as many as the scanner opens before it stops.
fn most_open(text: &[u8]) -> usize {
    let (mut open, mut most, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in text {
        match (in_string, b) {
            (true, _) if escaped => escaped = false,
            (true, b'\\') => escaped = true,
            (true, b'"') | (false, b'"') => in_string = !in_string,
            (false, b'[' | b'{') => {
                open += 1;
                most = most.max(open);
            }
            (false, b']' | b'}') => open = open.saturating_sub(1),
            _ => {}
        }
    }
    most
}

fn lookup(value: &Value, path: &str) -> Found {
    let mut value = value;
    for key in path.split('.') {
        match value.as_object().and_then(|object| object.get(key)) {
            Some(inner) => value = inner,
            None => return Found::Absent,
        }
    }
    value.as_u64().map_or(Found::Invalid, Found::Integer)
}

/// The module's rule: `Invalid` first, then `absent`, then the checked sum.
fn total(values: &[Found], absent: UsageError) -> Result<u64, UsageError> {
    if values.contains(&Found::Invalid) {
        return Err(UsageError::Invalid);
    }
    if values.contains(&Found::Absent) {
        return Err(absent);
    }
    values.iter().try_fold(0u64, |sum, value| match value {
        Found::Integer(n) => sum.checked_add(*n).ok_or(UsageError::Invalid),
        _ => Err(UsageError::Invalid),
    })
}
