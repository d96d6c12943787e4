//! Why admission refused a request, as a value: `response::refusal_response` alone turns it
//! into an answer.

use std::sync::Arc;
use std::time::Duration;

use crate::limit::RateStatus;
use crate::limit::window::Small;

/// Why admission refused a request: a plain value, turned into its answer by
/// `refusal_response` alone.
#[derive(Debug)]
pub(crate) enum Refusal<'a> {
    /// The client is on a deny list (which one stays in the logs).
    Forbidden,
    /// The client's address is over the edge layer's rate.
    EdgeLimited {
        status: RateStatus,
        retry_after: Duration,
    },
    /// The route is at its `max_in_flight`.
    TooBusy { route: &'a str },
    /// Over a limit.
    RateLimited {
        limit: Arc<str>,
        retry_after: Duration,
        /// The window that holds the request back longest first, then the others.
        statuses: Small<RateStatus>,
    },
    /// A key part is absent and the limit says `missing = "deny"`.
    MissingKey { limit: Arc<str>, part: String },
    /// The request carries a key part more than once.
    RepeatedKey { limit: Arc<str>, part: String },
    /// The shared store cannot decide and the limit says `on_error = "deny"`.
    StoreUnavailable {
        limit: Arc<str>,
        retry_after: Duration,
    },
}
