//! The one place where errors become HTTP answers. Every answer the gateway generates (rather
//! than forwards) is `application/problem+json` (RFC 9457) carrying the request id.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::added_fields::{Added, AddedFields};
use crate::config::ResponseStyle;
use crate::limit::{RateStatus, whole_seconds};
use crate::request_id::RequestId;
use Detail::{Json, Text};

pub use crate::body::ResponseBody;

/// Why a request was not forwarded, or why forwarding failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    BadRequest(#[from] crate::canonical::BadRequest),
    #[error("{0}")]
    Head(#[from] crate::http1::HeadError),
    #[error("the request carries {part} more than once; limit {limit:?} counts requests by it")]
    RepeatedKey { limit: String, part: String },
    #[error("the request body is malformed: {0}")]
    BadRequestBody(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the request body stopped arriving: nothing more within {after:?}")]
    RequestBodyTimeout { after: Duration },
    #[error("no route matches {method} {path}")]
    NoRoute { method: http::Method, path: String },
    #[error("request headers are larger than {limit} bytes")]
    HeadersTooLarge { limit: usize },
    #[error("upstream {upstream:?} has no healthy server")]
    NoHealthyServer { upstream: String },
    #[error("upstream {upstream:?} server {server} refused the connection")]
    UpstreamConnect {
        upstream: String,
        server: String,
        #[source]
        source: crate::proxy::connections::BoxError,
    },
    #[error("upstream {upstream:?} server {server} did not accept a connection within {after:?}")]
    UpstreamConnectTimeout {
        upstream: String,
        server: String,
        after: Duration,
    },
    #[error("upstream {upstream:?} server {server}: TLS handshake failed: {reason}")]
    UpstreamTls {
        upstream: String,
        server: String,
        reason: String,
    },
    #[error("upstream {upstream:?} server {server} did not answer within {after:?}")]
    UpstreamTimeout {
        upstream: String,
        server: String,
        after: Duration,
    },
    #[error("upstream {upstream:?} server {server} failed")]
    UpstreamFailed {
        upstream: String,
        server: String,
        #[source]
        source: crate::proxy::http1::ExchangeError,
    },
}

impl GatewayError {
    /// The status for this error, decided here and nowhere else.
    pub fn status(&self) -> StatusCode {
        match self {
            // RFC 9112 §6.1: a transfer coding the server does not understand.
            GatewayError::BadRequest(crate::canonical::BadRequest::TransferCoding(_)) => {
                StatusCode::NOT_IMPLEMENTED
            }
            GatewayError::Head(error) => head_status(error),
            GatewayError::BadRequest(_)
            | GatewayError::RepeatedKey { .. }
            | GatewayError::BadRequestBody(_) => StatusCode::BAD_REQUEST,
            GatewayError::RequestBodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            GatewayError::NoRoute { .. } => StatusCode::NOT_FOUND,
            GatewayError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            GatewayError::NoHealthyServer { .. } => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::UpstreamConnect { .. }
            | GatewayError::UpstreamTls { .. }
            | GatewayError::UpstreamFailed { .. } => StatusCode::BAD_GATEWAY,
            GatewayError::UpstreamConnectTimeout { .. } | GatewayError::UpstreamTimeout { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
        }
    }

    /// True when no connection to the upstream server was established, so nothing was sent.
    pub fn is_connect_failure(&self) -> bool {
        matches!(
            self,
            GatewayError::UpstreamConnect { .. } | GatewayError::UpstreamConnectTimeout { .. }
        )
    }

    /// What a client may be told. Upstream addresses stay in the logs, not in answers.
    fn public_detail(&self) -> String {
        match self {
            GatewayError::BadRequest(_)
            | GatewayError::Head(_)
            | GatewayError::RepeatedKey { .. }
            | GatewayError::BadRequestBody(_)
            | GatewayError::RequestBodyTimeout { .. }
            | GatewayError::NoRoute { .. }
            | GatewayError::HeadersTooLarge { .. } => self.to_string(),
            GatewayError::NoHealthyServer { .. } => {
                "no upstream server is available; try again later".into()
            }
            GatewayError::UpstreamConnect { .. } | GatewayError::UpstreamFailed { .. } => {
                "the upstream server refused the connection or did not answer properly".into()
            }
            GatewayError::UpstreamTls { .. } => {
                "a secure connection to the upstream server could not be made".into()
            }
            GatewayError::UpstreamConnectTimeout { .. } | GatewayError::UpstreamTimeout { .. } => {
                "the upstream server did not answer in time".into()
            }
        }
    }
}

/// The status for a request head the HTTP/1 server cannot serve.
fn head_status(error: &crate::http1::HeadError) -> StatusCode {
    use crate::http1::HeadError;
    match error {
        HeadError::Malformed(_)
        | HeadError::Target
        | HeadError::Framing(_)
        | HeadError::LatePreface => StatusCode::BAD_REQUEST,
        HeadError::TooLarge(_) | HeadError::TooManyFields(_) => {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        }
        // RFC 9110 §15.6.6.
        HeadError::Version => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
        // RFC 9112 §6.1: a transfer coding the server does not understand.
        HeadError::Coding(_) => StatusCode::NOT_IMPLEMENTED,
    }
}

/// 403 for a client on a deny list. Which list stays in the logs.
pub fn forbidden(request_id: &RequestId) -> Response<ResponseBody> {
    let detail = [Json("requests from your address are not accepted")];
    problem_response(StatusCode::FORBIDDEN, "about:blank", &detail, request_id)
}

/// A refusal by a rate policy (the edge layer or a limit), as `respond` turns it into a 429.
pub struct Denial<'a> {
    /// `edge` or the limit's name.
    pub policy: &'a str,
    pub retry_after: Duration,
    /// The window that holds the request back first, then every other one checked.
    pub statuses: &'a [RateStatus],
}

/// 429 with Retry-After (the exact wait, rounded up), the rate-limit headers and a
/// problem+json body naming the policy and the wait.
pub fn rate_limited(
    denial: &Denial<'_>,
    style: &ResponseStyle,
    request_id: &RequestId,
) -> Response<ResponseBody> {
    let wait = whole_seconds(denial.retry_after);
    let mut wait_text = itoa::Buffer::new();
    let detail = [
        Json(r#"rate limit \""#),
        Text(denial.policy),
        Json(r#"\" exceeded; retry in "#),
        Json(wait_text.format(wait)),
        Json(" s"),
    ];
    let status = StatusCode::TOO_MANY_REQUESTS;
    let mut response = problem_response(status, &style.problem_type, &detail, request_id);
    let added = response.body_mut().added_mut();
    added.add_composed(Added::RetryAfter, |out| push_number(out, "", wait));
    add_rate_fields(added, denial.statuses, style);
    response
}

/// 401 when a limit's key part is absent and the limit says `missing = "deny"`.
pub fn missing_key(limit: &str, part: &str, request_id: &RequestId) -> Response<ResponseBody> {
    let detail = [
        Json(r#"limit \""#),
        Text(limit),
        Json(r#"\" identifies clients by "#),
        Text(part),
        Json(", which the request lacks"),
    ];
    let mut response =
        problem_response(StatusCode::UNAUTHORIZED, "about:blank", &detail, request_id);
    let challenge = HeaderValue::from_static("Key realm=\"ratelimit-proxy\"");
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, challenge);
    response
}

/// 503 with Retry-After: 1 when a route is at its `max_in_flight`.
pub fn too_busy(route: &str, request_id: &RequestId) -> Response<ResponseBody> {
    let detail = [
        Json(r#"route \""#),
        Text(route),
        Json(r#"\" is at its concurrency limit; retry shortly"#),
    ];
    unavailable(&detail, 1, request_id)
}

/// 503 when the shared limit store cannot decide and the limit says `on_error = "deny"`: not a
/// 429, because the client is not known to be over its limit; Retry-After is when the store
/// will be tried again.
pub fn store_unavailable(
    limit: &str,
    retry_after: Duration,
    request_id: &RequestId,
) -> Response<ResponseBody> {
    let seconds = whole_seconds(retry_after).max(1);
    let mut seconds_text = itoa::Buffer::new();
    let detail = [
        Json(r#"limit \""#),
        Text(limit),
        Json(r#"\" cannot be checked right now (its store is unavailable); retry in "#),
        Json(seconds_text.format(seconds)),
        Json(" s"),
    ];
    unavailable(&detail, seconds, request_id)
}

/// A 503 problem with `Retry-After` in whole seconds.
fn unavailable(
    detail: &[Detail<'_>],
    retry_after_secs: u64,
    request_id: &RequestId,
) -> Response<ResponseBody> {
    let mut response = problem_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "about:blank",
        detail,
        request_id,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

/// `X-RateLimit-Limit/Remaining/Reset` for the first (most restrictive) status, the IETF
/// `RateLimit-Policy` listing every window, and `RateLimit` for the first.
pub fn add_rate_fields(added: &mut AddedFields, statuses: &[RateStatus], style: &ResponseStyle) {
    let Some(first) = statuses.first() else {
        return;
    };
    let reset = whole_seconds(first.reset);
    if style.x_ratelimit {
        added.add_composed(Added::XRateLimitLimit, |out| {
            push_number(out, "", first.policy.limit)
        });
        added.add_composed(Added::XRateLimitRemaining, |out| {
            push_number(out, "", first.remaining)
        });
        added.add_composed(Added::XRateLimitReset, |out| push_number(out, "", reset));
    }
    if style.ietf {
        added.add_composed(Added::RateLimitPolicy, |out| {
            for (i, status) in statuses.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                out.extend_from_slice(status.policy.item.as_bytes());
            }
        });
        added.add_composed(Added::RateLimit, |out| {
            push_item(out, &first.policy.name, ";r=", first.remaining);
            push_number(out, ";t=", reset);
        });
    }
}

/// `"name"` then `key` and `value` (`"per-key";q=100`).
fn push_item(out: &mut Vec<u8>, name: &str, key: &str, value: u64) {
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.push(b'"');
    push_number(out, key, value);
}

fn push_number(out: &mut Vec<u8>, key: &str, value: u64) {
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Turns an error into its problem+json answer.
pub fn error_response(error: &GatewayError, request_id: &RequestId) -> Response<ResponseBody> {
    let status = error.status();
    // A client's malformed request is its own business, whatever status answers it.
    let clients = matches!(
        error,
        GatewayError::BadRequest(_)
            | GatewayError::RepeatedKey { .. }
            | GatewayError::BadRequestBody(_)
    );
    if status.is_server_error() && !clients {
        tracing::warn!(error = %error, source = ?std::error::Error::source(error), "request failed");
    } else {
        tracing::debug!(error = %error, "request refused");
    }
    let detail = [Text(&error.public_detail())];
    problem_response(status, "about:blank", &detail, request_id)
}

/// A piece of a problem's detail.
pub enum Detail<'a> {
    /// The gateway's own words, and numbers: already the inside of a JSON string, copied as
    /// they are (escaping them again cost a denial ~300 instructions).
    Json(&'a str),
    /// Text from elsewhere (names from the config, an error's words): escaped.
    Text(&'a str),
}

/// A problem+json answer with the given status, type and detail, which is the text of
/// `detail`'s pieces one after the other, written straight into the body (a `format!` of the
/// detail and a second pass to escape it cost a denial ~600 instructions, 2.5%).
pub fn problem_response(
    status: StatusCode,
    problem_type: &str,
    detail: &[Detail<'_>],
    request_id: &RequestId,
) -> Response<ResponseBody> {
    let mut body = Vec::with_capacity(256);
    body.extend_from_slice(b"{\"type\":");
    push_json_string(&mut body, problem_type);
    body.extend_from_slice(b",\"title\":\"");
    // The standard reasons are plain words.
    let title = status.canonical_reason().unwrap_or("Error");
    debug_assert_eq!(first_to_escape(title.as_bytes()), None, "{title}");
    body.extend_from_slice(title.as_bytes());
    body.extend_from_slice(b"\",\"status\":");
    body.extend_from_slice(itoa::Buffer::new().format(status.as_u16()).as_bytes());
    body.extend_from_slice(b",\"detail\":\"");
    for piece in detail {
        match piece {
            Json(json) => body.extend_from_slice(json.as_bytes()),
            Text(text) => push_json_content(&mut body, text),
        }
    }
    body.push(b'"');
    body.extend_from_slice(b",\"request_id\":");
    push_json_string(&mut body, request_id.as_str());
    body.push(b'}');
    let mut response = Response::new(ResponseBody::problem(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// `text` as a JSON string. Written by hand: serde_json's general escaper was the largest
/// single cost of a denial. Runs of plain bytes are found eight at a time and copied at once.
fn push_json_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    push_json_content(out, text);
    out.push(b'"');
}

/// `text` escaped for the inside of a JSON string.
fn push_json_content(out: &mut Vec<u8>, text: &str) {
    let mut rest = text.as_bytes();
    while let Some(at) = first_to_escape(rest) {
        out.extend_from_slice(&rest[..at]);
        match rest[at] {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            control => out.extend_from_slice(format!("\\u{control:04x}").as_bytes()),
        }
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
}

/// Where the first byte JSON needs escaped is, eight bytes at a time: a problem's pieces are
/// short, and a byte at a time (past the last whole block) this cost a denial ~1k
/// instructions, 7%.
fn first_to_escape(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < 8 {
        return bytes.iter().position(|&byte| needs_escape(byte));
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
    // Whole words, then the last eight bytes: they overlap bytes found plain, which a borrow
    // cannot flag, so the lowest flag is still the first byte to escape.
    let last = bytes.len() - 8;
    let mut at = 0;
    loop {
        let start = at.min(last);
        let flags = escape_flags(word(start));
        if flags != 0 {
            return Some(start + flags.trailing_zeros() as usize / 8);
        }
        if start == last {
            return None;
        }
        at += 8;
    }
}

/// The top bit of each byte of `word` (read little-endian) that JSON needs escaped, and
/// perhaps of bytes above such a byte (a borrow), never below: the lowest is exact.
fn escape_flags(word: u64) -> u64 {
    const EACH: u64 = 0x0101_0101_0101_0101;
    const TOP: u64 = EACH * 0x80;
    // A byte's top bit is set after the subtraction, and clear before it, only when the byte
    // was below `n` (for `n` up to 0x80), or when a byte below it was.
    let below = |word: u64, n: u8| word.wrapping_sub(EACH * u64::from(n)) & !word & TOP;
    let equal = |byte: u8| below(word ^ (EACH * u64::from(byte)), 1);
    below(word, 0x20) | equal(b'"') | equal(b'\\')
}

/// What JSON allows in a string only escaped.
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Policy;
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
}
