//! Event streams: the WHATWG rules for lines, fields and dispatch, and the last event that
//! holds a field giving its value. Every stream is also fed split at each offset.

use super::scan_with;
use crate::usage::UsageError::{Invalid, Missing, TooLarge};
use crate::usage::{BodyFormat, Caps, UsageError};

fn sse(paths: &[&str], stream: &str) -> Result<u64, UsageError> {
    scan_with(
        BodyFormat::EventStream,
        Caps::DEFAULT,
        paths,
        stream.as_bytes(),
    )
}

fn total(stream: &str) -> Result<u64, UsageError> {
    sse(&["usage.total_tokens"], stream)
}

/// OpenAI's chat completions with `stream_options.include_usage`: the last chunk before
/// `[DONE]` has `usage`; the ones before it have `"usage": null`.
const OPENAI: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,",
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,",
    "\"total_tokens\":11}}\n\n",
    "data: [DONE]\n\n",
);

/// Anthropic's messages stream: input tokens in `message_start`'s message, the output
/// tokens in `message_delta` (which repeats `usage` at the top of the event).
const ANTHROPIC: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"role\":\"assistant\",",
    "\"content\":[],\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: ping\n",
    "data: {\"type\": \"ping\"}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

#[test]
fn openai_streams_settle_by_the_last_chunk() {
    assert_eq!(total(OPENAI), Ok(11));
    let summed = ["usage.prompt_tokens", "usage.completion_tokens"];
    assert_eq!(sse(&summed, OPENAI), Ok(11));
    // `"usage": null` in every chunk: the field is missing, not invalid.
    let cut = OPENAI
        .find("data: {\"id\":\"c1\",\"choices\":[],")
        .expect("the usage chunk");
    assert_eq!(total(&OPENAI[..cut]), Err(Missing));
}

#[test]
fn anthropic_streams_settle_by_fields_of_two_events() {
    let paths = ["message.usage.input_tokens", "usage.output_tokens"];
    assert_eq!(sse(&paths, ANTHROPIC), Ok(40));
    assert_eq!(sse(&["message.usage.output_tokens"], ANTHROPIC), Ok(1));
}

#[test]
fn lines_end_with_crlf_lf_or_cr() {
    let event = "data: {\"usage\":{\"total_tokens\":3}}";
    for end in ["\n", "\r\n", "\r"] {
        let stream = format!(": hi{end}event: x{end}{event}{end}{end}");
        assert_eq!(total(&stream), Ok(3), "{end:?}");
    }
    // Mixed, and a CR then an LF being one line end, never a blank line.
    let stream = format!("{event}\r\n\r{event}\n\r\n");
    assert_eq!(total(&stream), Ok(3));
    assert_eq!(total(&format!("{event}\r\n")), Err(Missing));
    assert_eq!(total(&format!("{event}\n\r")), Ok(3));
}

#[test]
fn a_leading_bom_is_dropped_and_only_there() {
    let event = "data: {\"usage\":{\"total_tokens\":3}}\n\n";
    assert_eq!(total(&format!("\u{feff}{event}")), Ok(3));
    // A second one is part of the first line's field name.
    assert_eq!(total(&format!("\u{feff}\u{feff}{event}")), Err(Missing));
    assert_eq!(total(&format!("{event}\u{feff}{event}")), Ok(3));
    let partial = [&b"\xEF\xBB"[..], event.as_bytes()].concat();
    let paths = ["usage.total_tokens"];
    assert_eq!(
        scan_with(BodyFormat::EventStream, Caps::DEFAULT, &paths, &partial),
        Err(Missing)
    );
    let later = [
        event.as_bytes(),
        b"\xEF\xBB\xBFdata: {\"usage\":{\"total_tokens\":4}}\n\n",
    ]
    .concat();
    assert_eq!(
        scan_with(BodyFormat::EventStream, Caps::DEFAULT, &paths, &later),
        Ok(3)
    );
}

#[test]
fn only_data_fields_are_read() {
    let stream = concat!(
        ": data: {\"usage\":{\"total_tokens\":1}}\n",
        "Data: {\"usage\":{\"total_tokens\":2}}\n",
        "datax: {\"usage\":{\"total_tokens\":3}}\n",
        "dat: {\"usage\":{\"total_tokens\":4}}\n",
        "event: {\"usage\":{\"total_tokens\":5}}\n",
        "id: 7\nretry: 10\n",
        "data:{\"usage\":{\"total_tokens\":6}}\n\n",
    );
    assert_eq!(total(stream), Ok(6));
    assert_eq!(total(&stream[..stream.len() - 41]), Err(Missing));
}

#[test]
fn data_lines_of_an_event_are_joined() {
    let stream =
        "data: {\"usage\":\ndata:\n  data:x\ndata: {\"total_tokens\"\ndata\ndata::\ndata: 7}}\n\n";
    assert_eq!(total(stream), Ok(7));
    // One space is dropped, the next is JSON's whitespace.
    assert_eq!(total("data:   {\"usage\":{\"total_tokens\":2}}\n\n"), Ok(2));
    // A number is not joined across lines: the "\n" is whitespace.
    assert_eq!(
        total("data: {\"usage\":{\"total_tokens\":1\ndata: 2}}\n\n"),
        Err(Missing)
    );
}

#[test]
fn the_last_event_holding_a_field_gives_its_value() {
    let event = |value: &str| format!("data: {{\"usage\":{{\"total_tokens\":{value}}}}}\n\n");
    assert_eq!(total(&(event("1") + &event("2"))), Ok(2));
    assert_eq!(total(&(event("\"x\"") + &event("2"))), Ok(2));
    assert_eq!(total(&(event("2") + &event("-1"))), Err(Invalid));
    assert_eq!(total(&(event("2") + "data: {\"other\":1}\n\n")), Ok(2));
    // An event that repeats `usage` without the field keeps the earlier value: each field
    // counts in the events that hold it.
    assert_eq!(total(&(event("2") + "data: {\"usage\":{}}\n\n")), Ok(2));
    // Fields come from different events.
    let stream = "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: {\"a\":3}\n\n";
    assert_eq!(sse(&["a", "b"], stream), Ok(5));
}

#[test]
fn events_that_are_not_json_hold_no_field() {
    let good = "data: {\"usage\":{\"total_tokens\":3}}\n\n";
    for bad in [
        "data: [DONE]\n\n",
        "data: {\"usage\":{\"total_tokens\":4}\n\n",
        "data: {\"usage\":{\"total_tokens\":4}} x\n\n",
        "data: {\"usage\":{\"total_tokens\":4}}\ndata: {}\n\n",
        "data:\n\n",
        "data\n\n",
        "event: x\n\n",
        "\n\n\n",
    ] {
        assert_eq!(total(&format!("{good}{bad}")), Ok(3), "{bad:?}");
        assert_eq!(total(&format!("{bad}{good}")), Ok(3), "{bad:?}");
        assert_eq!(total(bad), Err(Missing), "{bad:?}");
    }
}

#[test]
fn an_event_not_dispatched_is_dropped() {
    assert_eq!(
        total("data: {\"usage\":{\"total_tokens\":3}}"),
        Err(Missing)
    );
    assert_eq!(
        total("data: {\"usage\":{\"total_tokens\":3}}\n"),
        Err(Missing)
    );
    let stream =
        "data: {\"usage\":{\"total_tokens\":3}}\n\ndata: {\"usage\":{\"total_tokens\":4}}\n";
    assert_eq!(total(stream), Ok(3));
}

#[test]
fn an_event_over_the_cap_is_skipped_and_told() {
    let caps = Caps {
        event_bytes: 40,
        ..Caps::DEFAULT
    };
    let paths = ["usage.total_tokens"];
    let scan = |stream: &str| scan_with(BodyFormat::EventStream, caps, &paths, stream.as_bytes());
    // 28 bytes of data, then a data line of n spaces (one dropped) and the joining "\n".
    let event = "data: {\"usage\":{\"total_tokens\":3}}\n\n";
    let spaced = |value: u8, n: usize| {
        format!(
            "data: {{\"usage\":{{\"total_tokens\":{value}}}}}\ndata:{}\n\n",
            " ".repeat(n)
        )
    };
    let (padded, over) = (spaced(3, 12), spaced(4, 13));
    assert_eq!(scan(event), Ok(3));
    assert_eq!(scan(&padded), Ok(3));
    assert_eq!(scan(&over), Err(TooLarge));
    // A skipped event may have held a later value than those read: the usage is not known,
    // before or after a value.
    assert_eq!(scan(&format!("{over}{event}")), Err(TooLarge));
    assert_eq!(scan(&format!("{event}{over}")), Err(TooLarge));
    // Over the cap whatever its data is; not told unless dispatched.
    assert_eq!(
        scan(&format!("data: {}\n\n", "x".repeat(41))),
        Err(TooLarge)
    );
    assert_eq!(scan(&format!("data: {}\n\n", "x".repeat(40))), Err(Missing));
    assert_eq!(scan(&format!("{event}data: {}", "x".repeat(41))), Ok(3));
    assert_eq!(scan(&format!("data: {}", "x".repeat(41))), Err(Missing));
    // An invalid value is told before a skipped event.
    assert_eq!(
        scan(&format!(
            "data: {{\"usage\":{{\"total_tokens\":-1}}}}\n\n{over}"
        )),
        Err(Invalid)
    );
}

#[test]
fn an_event_nested_too_deep_is_skipped() {
    let deep = format!("data: {}{}\n\n", "[".repeat(129), "]".repeat(129));
    let event = "data: {\"usage\":{\"total_tokens\":3}}\n\n";
    assert_eq!(total(&deep), Err(TooLarge));
    assert_eq!(total(&format!("{deep}{event}")), Err(TooLarge));
    let fine = format!("data: {}{}\n\n", "[".repeat(128), "]".repeat(128));
    assert_eq!(total(&fine), Err(Missing));
}

#[test]
fn a_long_stream_keeps_the_last_value() {
    let fields = std::sync::Arc::new(
        crate::usage::UsageFields::parse(&["usage.total_tokens"]).expect("a path"),
    );
    let mut scanner = crate::usage::UsageScanner::new(&fields, BodyFormat::EventStream);
    for n in 0..100_000u64 {
        scanner.feed(format!("data: {{\"usage\":{{\"total_tokens\":{n}}}}}\n\n").as_bytes());
    }
    scanner.feed(b"data: [DONE]\n\n");
    assert_eq!(scanner.finish(), Ok(99_999));
}
