//! The one place where errors become HTTP answers. Every answer the gateway generates (rather
//! than forwards) is `application/problem+json` (RFC 9457) carrying the request id.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use serde::Serialize;

use crate::limit::RateStatus;

/// Body of every response: streamed from an upstream, or generated here.
pub type ResponseBody = Either<Incoming, Full<Bytes>>;

/// Why a request was not forwarded, or why forwarding failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
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
        source: hyper_util::client::legacy::Error,
    },
    #[error("upstream {upstream:?} server {server} did not accept a connection within {after:?}")]
    UpstreamConnectTimeout {
        upstream: String,
        server: String,
        after: Duration,
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
        source: hyper_util::client::legacy::Error,
    },
    #[error("the request cannot be forwarded: {reason}")]
    BadRequest { reason: &'static str },
}

impl GatewayError {
    /// The status for this error, decided here and nowhere else.
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::NoRoute { .. } => StatusCode::NOT_FOUND,
            GatewayError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            GatewayError::NoHealthyServer { .. } => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::UpstreamConnect { .. } | GatewayError::UpstreamFailed { .. } => {
                StatusCode::BAD_GATEWAY
            }
            GatewayError::UpstreamConnectTimeout { .. } | GatewayError::UpstreamTimeout { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
            GatewayError::BadRequest { .. } => StatusCode::BAD_REQUEST,
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
            GatewayError::NoRoute { .. }
            | GatewayError::HeadersTooLarge { .. }
            | GatewayError::BadRequest { .. } => self.to_string(),
            GatewayError::NoHealthyServer { .. } => {
                "no upstream server is available; try again later".into()
            }
            GatewayError::UpstreamConnect { .. } | GatewayError::UpstreamFailed { .. } => {
                "the upstream server refused or reset the connection".into()
            }
            GatewayError::UpstreamConnectTimeout { .. } | GatewayError::UpstreamTimeout { .. } => {
                "the upstream server did not answer in time".into()
            }
        }
    }
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    problem_type: &'a str,
    title: &'a str,
    status: u16,
    detail: &'a str,
    request_id: &'a str,
}

/// 403 for a client on a deny list. Which list stays in the logs.
pub fn forbidden(request_id: &HeaderValue) -> Response<ResponseBody> {
    problem_response(
        StatusCode::FORBIDDEN,
        "about:blank",
        "requests from your address are not accepted",
        request_id,
    )
}

/// 429 with Retry-After, the rate-limit headers and a problem+json body naming the policy.
pub fn rate_limited(
    status: &RateStatus,
    retry_after: Duration,
    request_id: &HeaderValue,
) -> Response<ResponseBody> {
    let wait = whole_seconds(retry_after);
    let detail = format!(
        "rate limit \"{}\" exceeded; retry in {wait} s",
        status.policy
    );
    let mut response = problem_response(
        StatusCode::TOO_MANY_REQUESTS,
        "about:blank",
        &detail,
        request_id,
    );
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from(wait));
    insert_rate_headers(headers, status);
    response
}

/// X-RateLimit-Limit/Remaining/Reset and the IETF draft `RateLimit-Policy` and `RateLimit`.
pub fn insert_rate_headers(headers: &mut http::HeaderMap, status: &RateStatus) {
    let reset = whole_seconds(status.reset);
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(status.limit));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(status.remaining));
    headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
    let policy = format!(
        "\"{}\";q={};w={}",
        status.policy,
        status.limit,
        status.window.as_secs().max(1)
    );
    let current = format!("\"{}\";r={};t={reset}", status.policy, status.remaining);
    if let (Ok(policy), Ok(current)) = (
        HeaderValue::from_str(&policy),
        HeaderValue::from_str(&current),
    ) {
        headers.insert(RATELIMIT_POLICY, policy);
        headers.insert(RATELIMIT, current);
    }
}

/// Rounded up: a client that waits this long is never early.
fn whole_seconds(duration: Duration) -> u64 {
    duration.as_nanos().div_ceil(1_000_000_000) as u64
}

pub const X_RATELIMIT_LIMIT: http::HeaderName = http::HeaderName::from_static("x-ratelimit-limit");
pub const X_RATELIMIT_REMAINING: http::HeaderName =
    http::HeaderName::from_static("x-ratelimit-remaining");
pub const X_RATELIMIT_RESET: http::HeaderName = http::HeaderName::from_static("x-ratelimit-reset");
pub const RATELIMIT_POLICY: http::HeaderName = http::HeaderName::from_static("ratelimit-policy");
pub const RATELIMIT: http::HeaderName = http::HeaderName::from_static("ratelimit");

/// Turns an error into its problem+json answer.
pub fn error_response(error: &GatewayError, request_id: &HeaderValue) -> Response<ResponseBody> {
    let status = error.status();
    if status.is_server_error() {
        tracing::warn!(error = %error, source = ?std::error::Error::source(error), "request failed");
    } else {
        tracing::debug!(error = %error, "request refused");
    }
    problem_response(status, "about:blank", &error.public_detail(), request_id)
}

/// A problem+json answer with the given status, type and detail.
pub fn problem_response(
    status: StatusCode,
    problem_type: &str,
    detail: &str,
    request_id: &HeaderValue,
) -> Response<ResponseBody> {
    let problem = Problem {
        problem_type,
        title: status.canonical_reason().unwrap_or("Error"),
        status: status.as_u16(),
        detail,
        request_id: request_id.to_str().unwrap_or_default(),
    };
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn problem_has_every_field_and_the_request_id() {
        let error = GatewayError::NoRoute {
            method: http::Method::GET,
            path: "/x".into(),
        };
        let response = error_response(&error, &HeaderValue::from_static("abc"));
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let Either::Right(body) = response.into_body() else {
            panic!("generated body expected")
        };
        let bytes = body.collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["status"], 404);
        assert_eq!(json["title"], "Not Found");
        assert_eq!(json["type"], "about:blank");
        assert_eq!(json["request_id"], "abc");
        assert_eq!(json["detail"], "no route matches GET /x");
    }

    #[test]
    fn rate_limited_rounds_waits_up_and_sends_both_header_families() {
        let status = RateStatus {
            policy: "edge".into(),
            limit: 200,
            window: Duration::from_secs(1),
            remaining: 0,
            reset: Duration::from_millis(1500),
        };
        let response = rate_limited(
            &status,
            Duration::from_millis(4001),
            &HeaderValue::from_static("id"),
        );
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = response.headers();
        assert_eq!(h["retry-after"], "5");
        assert_eq!(h["x-ratelimit-limit"], "200");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset"], "2");
        assert_eq!(h["ratelimit-policy"], "\"edge\";q=200;w=1");
        assert_eq!(h["ratelimit"], "\"edge\";r=0;t=2");
        assert_eq!(whole_seconds(Duration::from_secs(3)), 3);
        assert_eq!(whole_seconds(Duration::from_nanos(1)), 1);
    }
}
