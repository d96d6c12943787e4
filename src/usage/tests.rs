//! The rules of the module's documentation, each on small bodies; every body is also fed split
//! at each byte offset and a byte at a time, which must give the same result. Event streams
//! are in `tests/sse.rs`, the paths, content types and headers in `tests/api.rs`.

use std::sync::Arc;

use super::{BodyFormat, Caps, UsageError, UsageFields, UsageScanner};

mod api;
mod sse;

use UsageError::{Invalid, Malformed, Missing, TooLarge};

fn fields(paths: &[&str]) -> Arc<UsageFields> {
    Arc::new(UsageFields::parse(paths).expect("valid paths"))
}

fn run(
    fields: &Arc<UsageFields>,
    format: BodyFormat,
    caps: Caps,
    pieces: &[&[u8]],
) -> Result<u64, UsageError> {
    let mut scanner = UsageScanner::with_caps(fields, format, caps);
    for piece in pieces {
        scanner.feed(piece);
    }
    scanner.finish()
}

/// The result of `body` under `caps`, the same for every split of it.
pub(super) fn scan_with(
    format: BodyFormat,
    caps: Caps,
    paths: &[&str],
    body: &[u8],
) -> Result<u64, UsageError> {
    let fields = fields(paths);
    let whole = run(&fields, format, caps, &[body]);
    for at in 0..=body.len() {
        let (head, tail) = body.split_at(at);
        assert_eq!(
            run(&fields, format, caps, &[head, b"", tail]),
            whole,
            "split at {at}"
        );
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(
        run(&fields, format, caps, &bytes),
        whole,
        "a byte at a time"
    );
    whole
}

fn json(paths: &[&str], body: &str) -> Result<u64, UsageError> {
    scan_with(BodyFormat::Json, Caps::DEFAULT, paths, body.as_bytes())
}

fn total(body: &str) -> Result<u64, UsageError> {
    json(&["usage.total_tokens"], body)
}

#[test]
fn a_completion_body_settles_by_its_usage() {
    let body = r#"{
  "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi \"there\" \\ {\n}"},
               "logprobs": null, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21,
            "prompt_tokens_details": {"cached_tokens": 0}}
}
"#;
    assert_eq!(total(body), Ok(21));
    let summed = ["usage.prompt_tokens", "usage.completion_tokens"];
    assert_eq!(json(&summed, body), Ok(21));
    assert_eq!(
        json(&["usage.prompt_tokens_details.cached_tokens"], body),
        Ok(0)
    );
    assert_eq!(json(&["created"], body), Ok(1_700_000_000));
}

#[test]
fn a_value_is_a_non_negative_integer_in_digits_within_64_bits() {
    assert_eq!(total(r#"{"usage":{"total_tokens":0}}"#), Ok(0));
    assert_eq!(
        total(r#"{"usage":{"total_tokens":18446744073709551615}}"#),
        Ok(u64::MAX)
    );
    for value in [
        "-1",
        "-0",
        "1.5",
        "1e3",
        "1E3",
        "12.0",
        "0.0",
        "1e+2",
        "18446744073709551616",
        "99999999999999999999999",
        r#""12""#,
        "null",
        "true",
        "false",
        "{}",
        r#"{"n":1}"#,
        "[]",
        "[12]",
    ] {
        let body = format!(r#"{{"usage":{{"total_tokens":{value}}}}}"#);
        assert_eq!(total(&body), Err(Invalid), "{value}");
    }
}

#[test]
fn a_sum_over_64_bits_is_invalid() {
    let body = r#"{"a":18446744073709551615,"b":1}"#;
    assert_eq!(json(&["a", "b"], body), Err(Invalid));
    assert_eq!(
        json(&["a", "b"], r#"{"a":18446744073709551614,"b":1}"#),
        Ok(u64::MAX)
    );
}

#[test]
fn invalid_is_told_before_missing() {
    assert_eq!(json(&["a", "b"], r#"{"a":"x"}"#), Err(Invalid));
    assert_eq!(json(&["a", "b"], r#"{"b":1}"#), Err(Missing));
}

#[test]
fn a_field_not_at_its_path_is_missing() {
    for body in [
        r#"{}"#,
        r#"{"usage":{}}"#,
        r#"{"usage":null}"#,
        r#"{"usage":12}"#,
        r#"{"usage":"total_tokens"}"#,
        r#"{"total_tokens":12}"#,
        r#"{"other":{"total_tokens":12}}"#,
        r#"{"x":{"usage":{"total_tokens":12}}}"#,
        r#"{"usage":[{"total_tokens":12}]}"#,
        r#"[{"usage":{"total_tokens":12}}]"#,
        r#"{"usage":{"total_tokens_x":12,"total":1,"Total_tokens":2}}"#,
        "12",
        r#""usage""#,
        "null",
    ] {
        assert_eq!(total(body), Err(Missing), "{body}");
    }
}

#[test]
fn the_last_of_duplicate_keys_wins() {
    assert_eq!(json(&["t"], r#"{"t":1,"t":2}"#), Ok(2));
    assert_eq!(json(&["t"], r#"{"t":"x","t":3}"#), Ok(3));
    assert_eq!(json(&["t"], r#"{"t":3,"t":"x"}"#), Err(Invalid));
    assert_eq!(
        total(r#"{"usage":{"total_tokens":1},"usage":{"x":1}}"#),
        Err(Missing)
    );
    assert_eq!(
        total(r#"{"usage":{"total_tokens":1},"usage":null}"#),
        Err(Missing)
    );
    assert_eq!(
        total(r#"{"usage":{"total_tokens":1},"usage":{"total_tokens":5}}"#),
        Ok(5)
    );
    assert_eq!(
        total(r#"{"usage":{"total_tokens":1,"total_tokens":7}}"#),
        Ok(7)
    );
    // Another field's duplicate changes nothing of this one.
    let both = ["a.x", "b"];
    assert_eq!(json(&both, r#"{"a":{"x":1},"b":2,"b":3}"#), Ok(4));
}

#[test]
fn keys_are_compared_after_their_escapes() {
    assert_eq!(total(r#"{"us\u0061ge":{"\u0074otal_tokens":4}}"#), Ok(4));
    assert_eq!(
        total(r#"{"\u0075\u0073\u0061\u0067\u0065":{"total_tokens":4}}"#),
        Ok(4)
    );
    assert_eq!(json(&["a\"b"], r#"{"a\"b":1}"#), Ok(1));
    assert_eq!(json(&["a\\b"], r#"{"a\\b":1}"#), Ok(1));
    assert_eq!(json(&["a/b"], r#"{"a\/b":1}"#), Ok(1));
    assert_eq!(json(&["a\nb"], r#"{"a\nb":1}"#), Ok(1));
    assert_eq!(json(&["é"], r#"{"\u00e9":1}"#), Ok(1));
    assert_eq!(json(&["é"], r#"{"\u00E9":1}"#), Ok(1));
    assert_eq!(json(&["é"], "{\"é\":1}"), Ok(1));
    assert_eq!(json(&["😀"], r#"{"\ud83d\ude00":1}"#), Ok(1));
    assert_eq!(json(&["😀"], "{\"\u{1F600}\":1}"), Ok(1));
    // Case-sensitive; an escape is not its text.
    assert_eq!(json(&["Usage"], r#"{"usage":1}"#), Err(Missing));
    assert_eq!(json(&["u0061"], r#"{"\u0061":1}"#), Err(Missing));
    // A lone surrogate names nothing, whatever follows it.
    for key in [
        r#"\ud83d"#,
        r#"\ud83dx"#,
        r#"\ude00"#,
        r#"\ud83d\u0041"#,
        r#"\ud83d\n"#,
    ] {
        let body = format!(r#"{{"{key}":1}}"#);
        assert_eq!(json(&["x"], &body), Err(Missing), "{key}");
        assert_eq!(json(&["A"], &body), Err(Missing), "{key}");
    }
}

#[test]
fn string_contents_are_skipped_not_checked() {
    // Raw control characters, bytes that are not UTF-8 and lone surrogates in strings.
    let body = b"{\"s\":\"\x01\t\n\xff\xfe\\ud800\",\"\xff\":1,\"t\":2}";
    assert_eq!(
        scan_with(BodyFormat::Json, Caps::DEFAULT, &["t"], body),
        Ok(2)
    );
    // Escapes in strings are checked all the same.
    assert_eq!(json(&["t"], r#"{"s":"\x","t":2}"#), Err(Malformed));
    assert_eq!(json(&["t"], r#"{"s":"\u12g4","t":2}"#), Err(Malformed));
}

#[test]
fn a_syntax_error_anywhere_is_malformed() {
    for body in [
        "",
        " \n\t\r",
        "{",
        "}",
        "{\"usage\":{\"total_tokens\":1}",
        "{\"usage\":{\"total_tokens\":1}}}",
        "{\"usage\":{\"total_tokens\":1}} x",
        "{\"usage\":{\"total_tokens\":1}}{}",
        "{} {}",
        "{\"usage\":{\"total_tokens\":01}}",
        "{\"usage\":{\"total_tokens\":1.}}",
        "{\"a\":-}",
        "{\"a\":1e}",
        "{\"a\":1e+}",
        "{\"a\":.5}",
        "{\"a\":+1}",
        "[1,]",
        "[,1]",
        "{\"a\":1,}",
        "{,}",
        "{\"a\" 1}",
        "{\"a\"::1}",
        "{\"a\":1 \"b\":2}",
        "{a:1}",
        "{'a':1}",
        "[1 2]",
        "[1}",
        "{\"a\":1]",
        "tru",
        "truex",
        "nul",
        "nulll",
        "[true false]",
        "\"abc",
        "\"\\",
        "\"\\u12\"",
        "NaN",
        "Infinity",
        "-",
        "1 2",
        "\u{feff}{}",
        "{\"a\":\x01}",
        "{\"usage\":{\"total_tokens\":12}} \u{0}",
    ] {
        assert_eq!(total(body), Err(Malformed), "{body:?}");
    }
}

#[test]
fn whitespace_around_values_is_allowed() {
    let body =
        " \r\n\t{ \"usage\" \n:\t{\r\"total_tokens\"  :  8 \n} , \"x\" : [ 1 , { } ] }\n\r\t ";
    assert_eq!(total(body), Ok(8));
    assert_eq!(total("12 "), Err(Missing));
    assert_eq!(total(" -1.5e-3 "), Err(Missing));
}

#[test]
fn nesting_deeper_than_the_cap_is_too_large() {
    let nested = |depth: usize| "[".repeat(depth) + &"]".repeat(depth);
    assert_eq!(total(&nested(128)), Err(Missing));
    assert_eq!(total(&nested(129)), Err(TooLarge));
    let objects =
        |depth: usize| "{\"usage\":".repeat(depth) + "{\"total_tokens\":3}" + &"}".repeat(depth);
    assert_eq!(total(&objects(1)), Ok(3));
    assert_eq!(total(&objects(127)), Err(Missing));
    assert_eq!(total(&objects(128)), Err(TooLarge));
    // Too deep is told even where a field was found before.
    let body = format!("{{\"usage\":{{\"total_tokens\":3}},\"x\":{}}}", nested(200));
    assert_eq!(total(&body), Err(TooLarge));
    // A syntax error before the depth is reached is told instead.
    assert_eq!(total(&format!("{{x{}", nested(200))), Err(Malformed));
}

#[test]
fn a_body_over_the_byte_cap_is_too_large() {
    let caps = Caps {
        document_bytes: 30,
        ..Caps::DEFAULT
    };
    let paths = ["usage.total_tokens"];
    let body = br#"{"usage":{"total_tokens":42}}"#;
    assert_eq!(body.len(), 29);
    assert_eq!(scan_with(BodyFormat::Json, caps, &paths, body), Ok(42));
    assert_eq!(
        scan_with(BodyFormat::Json, caps, &paths, &[&body[..], b" "].concat()),
        Ok(42)
    );
    assert_eq!(
        scan_with(BodyFormat::Json, caps, &paths, &[&body[..], b"  "].concat()),
        Err(TooLarge)
    );
    // A syntax error within the cap is told instead.
    assert_eq!(
        scan_with(
            BodyFormat::Json,
            caps,
            &paths,
            &[b"{x", &[b' '; 40][..]].concat()
        ),
        Err(Malformed)
    );
}

#[test]
fn the_byte_cap_in_service_is_16_mib() {
    let fields = fields(&["usage.total_tokens"]);
    let body = br#"{"usage":{"total_tokens":42}}"#;
    let pad = vec![b' '; 1 << 20];
    let mut scanner = UsageScanner::new(&fields, BodyFormat::Json);
    scanner.feed(body);
    for _ in 0..15 {
        scanner.feed(&pad);
    }
    scanner.feed(&pad[..(1 << 20) - body.len()]);
    assert_eq!(scanner.clone().finish(), Ok(42));
    scanner.feed(b" ");
    assert_eq!(scanner.finish(), Err(TooLarge));
}

#[test]
fn eight_fields_and_deep_paths_are_read() {
    let eight = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let body = r#"{"h":8,"g":7,"f":6,"e":5,"d":4,"c":3,"b":2,"a":1}"#;
    assert_eq!(json(&eight, body), Ok(36));
    let deep = ["a.b.c.d.e.f.g.h", "a.b.c.x"];
    let body = r#"{"a":{"b":{"c":{"x":1,"d":{"e":{"f":{"g":{"h":41}}}}}}}}"#;
    assert_eq!(json(&deep, body), Ok(42));
    // A path and a path through it: the object is no number.
    assert_eq!(json(&["a", "a.b"], r#"{"a":{"b":1}}"#), Err(Invalid));
}

#[test]
fn long_keys_are_compared_only_as_far_as_a_path_goes() {
    let key = "k".repeat(128);
    let body = format!("{{\"{key}\":5,\"{key}k\":6,\"{}\":7}}", "k".repeat(1000));
    assert_eq!(json(&[&key], &body[..]), Ok(5));
}
