use super::problem::{first_to_escape, needs_escape, push_json_content, push_json_string};
use super::refusal::{Denial, forbidden, missing_key, rate_limited, store_unavailable, too_busy};
use super::*;
use crate::limit::Policy;
use http::{HeaderValue, header};
use http_body_util::BodyExt;
use proptest::prelude::*;
use std::sync::Arc;

#[tokio::test]
async fn problem_has_every_field_and_the_request_id() {
    let error = GatewayError::NoRoute {
        method: http::Method::GET,
        path: "/x".into(),
    };
    let response = error_response(&error, &RequestId::Kept(HeaderValue::from_static("abc")));
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let response = ResponseBody::with_fields_in_headers(response);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(json["status"], 404);
    assert_eq!(json["title"], "Not Found");
    assert_eq!(json["type"], "about:blank");
    assert_eq!(json["request_id"], "abc");
    assert_eq!(json["detail"], "no route matches GET /x");
}

#[tokio::test]
async fn a_refused_trace_is_a_405_listing_the_methods_forwarded() {
    let error = GatewayError::BadRequest(crate::request::canonical::BadRequest::Trace);
    let response = error_response(&error, &RequestId::Kept(HeaderValue::from_static("abc")));
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let allow = response.headers()[header::ALLOW].to_str().unwrap();
    assert!(allow.contains("GET") && !allow.contains("TRACE"), "{allow}");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        (json["status"].as_u64(), json["detail"].as_str()),
        (Some(405), Some("TRACE is not served"))
    );
}

async fn detail_of(response: Response<ResponseBody>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    json["detail"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn details_written_in_pieces_read_as_one_sentence() {
    let id = RequestId::Kept(HeaderValue::from_static("id"));
    let denial = Denial {
        policy: "per \"key\"\\",
        retry_after: Duration::from_millis(1200),
        statuses: &[],
    };
    let answer = rate_limited(&denial, &ResponseStyle::default(), &id);
    assert_eq!(
        detail_of(answer).await,
        "rate limit \"per \"key\"\\\" exceeded; retry in 2 s"
    );
    assert_eq!(
        detail_of(missing_key("per-key", "header x-api-key", &id)).await,
        "limit \"per-key\" identifies clients by header x-api-key, which the request lacks"
    );
    assert_eq!(
        detail_of(too_busy("a\"pi", &id)).await,
        "route \"a\"pi\" is at its concurrency limit; retry shortly"
    );
    assert_eq!(
        detail_of(forbidden(&id)).await,
        "requests from your address are not accepted"
    );
    let unavailable = store_unavailable("per-key", Duration::from_millis(2500), &id);
    assert_eq!(unavailable.headers()[header::RETRY_AFTER], "3");
    assert_eq!(
        detail_of(unavailable).await,
        "limit \"per-key\" cannot be checked right now (its store is unavailable); retry in 3 s"
    );
}

proptest! {
    #[test]
    fn json_strings_read_back_as_written(text in any::<String>()) {
        let mut json = Vec::new();
        push_json_string(&mut json, &text);
        let read: String = serde_json::from_slice(&json).unwrap();
        prop_assert_eq!(read, text);
    }

    #[test]
    fn pieces_read_back_as_their_concatenation(pieces in proptest::collection::vec(any::<String>(), 0..5)) {
        let mut json = vec![b'"'];
        for piece in &pieces {
            push_json_content(&mut json, piece);
        }
        json.push(b'"');
        let read: String = serde_json::from_slice(&json).unwrap();
        prop_assert_eq!(read, pieces.concat());
    }

    #[test]
    fn the_first_byte_to_escape_is_the_one_a_byte_at_a_time_search_finds(
        bytes in proptest::collection::vec(
            prop_oneof![
                8 => 0x20u8..0x7f,
                1 => Just(b'"'),
                1 => Just(b'\\'),
                1 => 0u8..0x21,
                1 => 0x7fu8..0x81,
                1 => any::<u8>(),
            ],
            0..40,
        ),
    ) {
        let expected = bytes.iter().position(|&byte| needs_escape(byte));
        prop_assert_eq!(first_to_escape(&bytes), expected);
    }

    #[test]
    fn printable_ascii_reads_back_as_written(text in "[ -~]{0,80}") {
        let mut json = Vec::new();
        push_json_string(&mut json, &text);
        let read: String = serde_json::from_slice(&json).unwrap();
        prop_assert_eq!(read, text);
    }
}

#[test]
fn json_strings_escape_quotes_backslashes_and_controls() {
    let mut json = Vec::new();
    push_json_string(&mut json, "a\"b\\c\nd\u{1}e\u{7f}é");
    assert_eq!(json, "\"a\\\"b\\\\c\\nd\\u0001e\u{7f}é\"".as_bytes());
}

#[test]
fn rate_limited_rounds_waits_up_and_sends_both_header_families() {
    let status = |policy: &str, limit, window, remaining, reset_ms| RateStatus {
        policy: Arc::new(Policy::new(policy, limit, Duration::from_secs(window))),
        remaining,
        reset: Duration::from_millis(reset_ms),
    };
    let statuses = [
        status("per-key-1m", 100, 60, 0, 1500),
        status("per-key-1d", 5000, 86400, 4000, 86_000_000),
    ];
    let denial = Denial {
        policy: "per-key",
        retry_after: Duration::from_millis(4001),
        statuses: &statuses,
    };
    let style = ResponseStyle::default();
    let response = rate_limited(
        &denial,
        &style,
        &RequestId::Kept(HeaderValue::from_static("id")),
    );
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let response = ResponseBody::with_fields_in_headers(response);
    let h = response.headers();
    assert_eq!(h["retry-after"], "5");
    assert_eq!(h["x-ratelimit-limit"], "100");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["x-ratelimit-reset"], "2");
    assert_eq!(
        h["ratelimit-policy"],
        "\"per-key-1m\";q=100;w=60, \"per-key-1d\";q=5000;w=86400"
    );
    assert_eq!(h["ratelimit"], "\"per-key-1m\";r=0;t=2");
    assert_eq!(whole_seconds(Duration::from_secs(3)), 3);
    assert_eq!(whole_seconds(Duration::from_nanos(1)), 1);

    let only_ietf = ResponseStyle {
        x_ratelimit: false,
        ..ResponseStyle::default()
    };
    let response = rate_limited(
        &denial,
        &only_ietf,
        &RequestId::Kept(HeaderValue::from_static("id")),
    );
    let response = ResponseBody::with_fields_in_headers(response);
    assert!(response.headers().get("x-ratelimit-limit").is_none());
    assert!(response.headers().contains_key("ratelimit"));
}
