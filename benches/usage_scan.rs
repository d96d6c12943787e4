//! The usage scanner over the answers it reads on every streamed chunk:
//! `cargo bench --bench usage_scan`. Throughput in bytes, so criterion's time per iteration
//! over 64 (KiB) is the cost per KiB of body forwarded.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ratelimit_proxy::testing::{BodyFormat, UsageFields, UsageScanner};

const BODY_BYTES: usize = 64 * 1024;
/// The pieces a body is fed in, as the upstream client hands them over.
const PIECE: usize = 16 * 1024;

/// Model output: words, with the escapes JSON writers put in text.
fn text(bytes: usize, seed: u64) -> String {
    const WORDS: [&str; 12] = [
        "the",
        "limit",
        "gateway",
        "token",
        "settles",
        "usage",
        "of",
        "an",
        "answer",
        "\\n",
        "\\\"quoted\\\"",
        "caf\\u00e9",
    ];
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut text = String::with_capacity(bytes);
    loop {
        let word = WORDS[rng.usize(..WORDS.len())];
        if text.len() + word.len() + 1 > bytes {
            break;
        }
        text.push_str(word);
        text.push(' ');
    }
    while text.len() < bytes {
        text.push('.');
    }
    text
}

/// A chat completion of 64 KiB, pretty-printed as many servers send it, `usage` last.
fn completion() -> Vec<u8> {
    let head = "{\n  \"id\": \"chatcmpl-0123456789\",\n  \"object\": \"chat.completion\",\n  \
        \"created\": 1700000000,\n  \"model\": \"gpt-4o-mini\",\n  \"choices\": [\n    {\n      \
        \"index\": 0,\n      \"message\": {\n        \"role\": \"assistant\",\n        \"content\": \"";
    let tail = "\"\n      },\n      \"logprobs\": null,\n      \"finish_reason\": \"stop\"\n    }\n  ],\n  \
        \"usage\": {\n    \"prompt_tokens\": 912,\n    \"completion_tokens\": 14035,\n    \
        \"total_tokens\": 14947\n  }\n}\n";
    let content = text(BODY_BYTES - head.len() - tail.len(), 1);
    let body = format!("{head}{content}{tail}");
    body.into_bytes()
}

/// An OpenAI-style stream of 64 KiB: ~200 chunk events, `usage` in the last before `[DONE]`.
fn stream() -> Vec<u8> {
    let chunk = |content: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-0123456789\",\"object\":\"chat.completion.chunk\",\
             \"created\":1700000000,\"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_0123\",\
             \"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"logprobs\":null,\
             \"finish_reason\":null}}],\"usage\":null}}\n\n"
        )
    };
    let last = "data: {\"id\":\"chatcmpl-0123456789\",\"object\":\"chat.completion.chunk\",\
        \"choices\":[],\"usage\":{\"prompt_tokens\":912,\"completion_tokens\":200,\
        \"total_tokens\":1112}}\n\ndata: [DONE]\n\n";
    let mut body = String::new();
    let mut seed = 2;
    while body.len() + chunk(&text(100, 0)).len() + last.len() <= BODY_BYTES {
        body.push_str(&chunk(&text(100, seed)));
        seed += 1;
    }
    let room = BODY_BYTES - body.len() - last.len();
    if let Some(content) = room.checked_sub(chunk("").len()) {
        body.push_str(&chunk(&text(content, seed)));
    }
    body.push_str(last);
    let events = body.matches("\n\n").count();
    assert!((190..=210).contains(&events), "{events} events");
    body.into_bytes()
}

fn scan(fields: &Arc<UsageFields>, format: BodyFormat, body: &[u8]) -> Result<u64, String> {
    let mut scanner = UsageScanner::new(fields, format);
    for piece in body.chunks(PIECE) {
        scanner.feed(black_box(piece));
    }
    scanner.finish().map_err(|e| e.to_string())
}

fn usage_scan(c: &mut Criterion) {
    let total = Arc::new(UsageFields::parse(&["usage.total_tokens"]).unwrap());
    let summed =
        Arc::new(UsageFields::parse(&["usage.prompt_tokens", "usage.completion_tokens"]).unwrap());
    let cases = [
        ("json completion", BodyFormat::Json, completion(), 14947),
        (
            "event stream, ~200 chunks",
            BodyFormat::EventStream,
            stream(),
            1112,
        ),
    ];
    let mut group = c.benchmark_group("usage scan, 64 KiB");
    for (name, format, body, expected) in cases {
        assert!(
            body.len() <= BODY_BYTES && body.len() > BODY_BYTES - 512,
            "{name}"
        );
        assert_eq!(scan(&total, format, &body), Ok(expected), "{name}");
        assert_eq!(scan(&summed, format, &body), Ok(expected), "{name}");
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(name, |b| b.iter(|| scan(&total, format, &body)));
    }
    group.finish();
}

criterion_group!(benches, usage_scan);
criterion_main!(benches);
