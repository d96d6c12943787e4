//! Admission's refusals as answers: admission decides and returns a `Refusal`; the pipeline
//! asks `refusal_response` for its answer (403, 429, 401, 400 or 503).

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use super::problem::Detail::{self, Json, Text};
use super::problem::problem_response;
use super::{GatewayError, ResponseBody, add_rate_fields, error_response, push_number};
use crate::admission::refusal::Refusal;
use crate::config::ResponseStyle;
use crate::fields::added::Added;
use crate::limit::{RateStatus, whole_seconds};
use crate::request::id::RequestId;

/// The answer to a refused request. Takes the refusal by value: a repeated key's part moves
/// into its error rather than being copied.
pub(crate) fn refusal_response(
    refusal: Refusal<'_>,
    style: &ResponseStyle,
    request_id: &RequestId,
) -> Response<ResponseBody> {
    match refusal {
        Refusal::Forbidden => forbidden(request_id),
        Refusal::EdgeLimited {
            status,
            retry_after,
        } => {
            let denial = Denial {
                policy: crate::admission::edge::POLICY_NAME,
                retry_after,
                statuses: std::slice::from_ref(&status),
            };
            rate_limited(&denial, style, request_id)
        }
        Refusal::TooBusy { route } => too_busy(route, request_id),
        Refusal::RateLimited {
            limit,
            retry_after,
            statuses,
        } => {
            let denial = Denial {
                policy: &limit,
                retry_after,
                statuses: &statuses,
            };
            rate_limited(&denial, style, request_id)
        }
        Refusal::MissingKey { limit, part } => missing_key(&limit, &part, request_id),
        Refusal::RepeatedKey { limit, part } => {
            let limit = limit.to_string();
            error_response(&GatewayError::RepeatedKey { limit, part }, request_id)
        }
        Refusal::StoreUnavailable { limit, retry_after } => {
            store_unavailable(&limit, retry_after, request_id)
        }
    }
}

/// 403 for a client on a deny list. Which list stays in the logs.
pub(super) fn forbidden(request_id: &RequestId) -> Response<ResponseBody> {
    let detail = [Json("requests from your address are not accepted")];
    problem_response(StatusCode::FORBIDDEN, "about:blank", &detail, request_id)
}

/// A refusal by a rate policy (the edge layer or a limit), as `respond` turns it into a 429.
pub(super) struct Denial<'a> {
    /// `edge` or the limit's name.
    pub(super) policy: &'a str,
    pub(super) retry_after: Duration,
    /// The window that holds the request back first, then every other one checked.
    pub(super) statuses: &'a [RateStatus],
}

/// 429 with Retry-After (the exact wait, rounded up), the rate-limit headers and a
/// problem+json body naming the policy and the wait.
pub(super) fn rate_limited(
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
pub(super) fn missing_key(
    limit: &str,
    part: &str,
    request_id: &RequestId,
) -> Response<ResponseBody> {
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
pub(super) fn too_busy(route: &str, request_id: &RequestId) -> Response<ResponseBody> {
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
pub(super) fn store_unavailable(
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
