//! What is parsed outside bodies: the paths at load, the Content-Type that picks a format,
//! a usage header's value, and the metric's labels.

use crate::usage::UsageError::Invalid;
use crate::usage::fields::FieldsError;
use crate::usage::{BodyFormat, UsageFields, parse_header_value};

#[test]
fn paths_are_checked_at_load() {
    assert_eq!(UsageFields::parse(&[]), Err(FieldsError::NoFields));
    assert_eq!(UsageFields::parse(&[""]), Err(FieldsError::EmptyPath));
    for path in ["a..b", ".a", "a.", "."] {
        assert_eq!(
            UsageFields::parse(&[path]),
            Err(FieldsError::EmptySegment(path.into()))
        );
    }
    let nine = "a.b.c.d.e.f.g.h.i";
    assert_eq!(
        UsageFields::parse(&[nine]),
        Err(FieldsError::TooManySegments(nine.into()))
    );
    assert!(UsageFields::parse(&["a.b.c.d.e.f.g.h"]).is_ok());
    let long = "k".repeat(129);
    assert_eq!(
        UsageFields::parse(&[&long]),
        Err(FieldsError::SegmentTooLong(long.clone()))
    );
    assert!(UsageFields::parse(&[&long[1..]]).is_ok());
    assert_eq!(
        UsageFields::parse(&["a", "a"]),
        Err(FieldsError::Repeated("a".into()))
    );
    let eight = ["a", "b", "c", "d", "e", "f", "g", "h"];
    assert!(UsageFields::parse(&eight).is_ok());
    let nine = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    assert_eq!(UsageFields::parse(&nine), Err(FieldsError::TooManyFields));
}

#[test]
fn content_types_name_the_format() {
    for value in [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        " application/json ;charset=UTF-8",
        "application/problem+json",
        "application/vnd.api+JSON",
        "application/json\t",
    ] {
        assert_eq!(
            BodyFormat::of_content_type(value.as_bytes()),
            Some(BodyFormat::Json),
            "{value}"
        );
    }
    for value in ["text/event-stream", "TEXT/Event-Stream; charset=utf-8"] {
        assert_eq!(
            BodyFormat::of_content_type(value.as_bytes()),
            Some(BodyFormat::EventStream),
            "{value}"
        );
    }
    for value in [
        "",
        "json",
        "text/json",
        "text/plain",
        "application/+json",
        "application/jsonx",
        "application/x-ndjson",
        "application / json",
        "application/json x",
        "text/event-stream2",
        "/json",
        "application/",
        "application/json+",
        "multipart/form-data+json",
    ] {
        assert_eq!(
            BodyFormat::of_content_type(value.as_bytes()),
            None,
            "{value}"
        );
    }
    assert_eq!(BodyFormat::of_content_type(b"application/json\xff"), None);
}

#[test]
fn header_values_are_digits_within_64_bits() {
    assert_eq!(parse_header_value(b"0"), Ok(0));
    assert_eq!(parse_header_value(b"1234"), Ok(1234));
    assert_eq!(parse_header_value(b" \t42\t "), Ok(42));
    assert_eq!(parse_header_value(b"007"), Ok(7));
    assert_eq!(parse_header_value(b"18446744073709551615"), Ok(u64::MAX));
    assert_eq!(parse_header_value(b"00000000000000000001"), Ok(1));
    for value in [
        &b""[..],
        b" ",
        b"\t",
        b"+1",
        b"-1",
        b"1.0",
        b"1e3",
        b"1 2",
        b"0x10",
        b"18446744073709551616",
        b"000000000000000000001",
        b"99999999999999999999",
        b"\n1",
        b"1\r",
        b"\xff",
        b"1,2",
    ] {
        assert_eq!(
            parse_header_value(value),
            Err(Invalid),
            "{:?}",
            String::from_utf8_lossy(value)
        );
    }
}
