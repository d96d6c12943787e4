//! The one place where errors become HTTP answers. Every answer the gateway generates (rather
//! than forwards) is `application/problem+json` (RFC 9457) carrying the request id: typed
//! errors here, admission's refusals in `refusal.rs`, the problem document in `problem.rs`.

pub(crate) mod body;
mod problem;
mod refusal;
#[cfg(test)]
mod tests;

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use crate::config::ResponseStyle;
use crate::fields::added::{Added, AddedFields};
use crate::limit::{RateStatus, whole_seconds};
use crate::request::id::RequestId;
use problem::Detail::Text;
use problem::problem_response;

pub(crate) use crate::response::body::ResponseBody;
pub(crate) use refusal::refusal_response;

/// Why a request was not forwarded, or why forwarding failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GatewayError {
    #[error("{0}")]
    BadRequest(#[from] crate::request::canonical::BadRequest),
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
        source: crate::upstream::connections::BoxError,
    },
    #[error(
        "upstream {upstream:?} server {server}: no connection made, the gateway is out of {}",
        resource.label().replace('_', " ")
    )]
    LocalShortage {
        upstream: String,
        server: String,
        resource: crate::rt::shortage::Shortage,
        #[source]
        source: crate::upstream::connections::BoxError,
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
        source: crate::upstream::http1::ExchangeError,
    },
}

impl GatewayError {
    /// The status for this error, decided here and nowhere else.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            // RFC 9112 §6.1: a transfer coding the server does not understand.
            GatewayError::BadRequest(crate::request::canonical::BadRequest::TransferCoding(_)) => {
                StatusCode::NOT_IMPLEMENTED
            }
            // RFC 9110 §15.5.6, with `Allow` (`error_response`).
            GatewayError::BadRequest(crate::request::canonical::BadRequest::Trace) => {
                StatusCode::METHOD_NOT_ALLOWED
            }
            GatewayError::Head(error) => head_status(error),
            GatewayError::BadRequest(_)
            | GatewayError::RepeatedKey { .. }
            | GatewayError::BadRequestBody(_) => StatusCode::BAD_REQUEST,
            GatewayError::RequestBodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            GatewayError::NoRoute { .. } => StatusCode::NOT_FOUND,
            GatewayError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            GatewayError::NoHealthyServer { .. } | GatewayError::LocalShortage { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            GatewayError::UpstreamConnect { .. }
            | GatewayError::UpstreamTls { .. }
            | GatewayError::UpstreamFailed { .. } => StatusCode::BAD_GATEWAY,
            GatewayError::UpstreamConnectTimeout { .. } | GatewayError::UpstreamTimeout { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
        }
    }

    /// True when no connection to the upstream server was established, so nothing was sent.
    pub(crate) fn is_connect_failure(&self) -> bool {
        matches!(
            self,
            GatewayError::UpstreamConnect { .. }
                | GatewayError::UpstreamConnectTimeout { .. }
                | GatewayError::LocalShortage { .. }
        )
    }

    /// What settling may assume of a request the gateway answered with this error: sent to no
    /// upstream, or perhaps received by one that did not answer.
    pub(crate) fn answered_by(&self) -> crate::limit::charge::AnsweredBy {
        use crate::limit::charge::AnsweredBy;
        match self {
            GatewayError::NoHealthyServer { .. }
            | GatewayError::LocalShortage { .. }
            | GatewayError::UpstreamConnect { .. }
            | GatewayError::UpstreamConnectTimeout { .. }
            | GatewayError::UpstreamTls { .. } => AnsweredBy::NotSent,
            other => AnsweredBy::Unknown {
                upstream_error: other.no_upstream_answer(),
            },
        }
    }

    /// True when no upstream answered: the gateway made the answer (502, 503, 504) because no
    /// server could be reached, none answered in time, or the exchange failed before a head.
    pub(crate) fn no_upstream_answer(&self) -> bool {
        matches!(
            self,
            GatewayError::NoHealthyServer { .. }
                | GatewayError::LocalShortage { .. }
                | GatewayError::UpstreamConnect { .. }
                | GatewayError::UpstreamConnectTimeout { .. }
                | GatewayError::UpstreamTls { .. }
                | GatewayError::UpstreamTimeout { .. }
                | GatewayError::UpstreamFailed { .. }
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
            GatewayError::LocalShortage { resource, .. } => format!(
                "the gateway is out of {} for now; try again later",
                resource.label().replace('_', " ")
            ),
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

/// `X-RateLimit-Limit/Remaining/Reset` for the first (most restrictive) status, the IETF
/// `RateLimit-Policy` listing every window, and `RateLimit` for the first.
pub(crate) fn add_rate_fields(
    added: &mut AddedFields,
    statuses: &[RateStatus],
    style: &ResponseStyle,
) {
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
pub(crate) fn error_response(
    error: &GatewayError,
    request_id: &RequestId,
) -> Response<ResponseBody> {
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
    let mut response = problem_response(status, "about:blank", &detail, request_id);
    if status == StatusCode::METHOD_NOT_ALLOWED {
        // RFC 9110 §15.5.6: a 405 lists the methods the resource supports. The gateway forwards
        // any method but TRACE and CONNECT; these are RFC 9110's and PATCH (RFC 5789).
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
    }
    response
}

/// `Allow` of a 405 (TRACE refused).
const ALLOWED_METHODS: &str = "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH";
