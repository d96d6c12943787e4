//! What admission saw of one request: filled as it decides, counted once the request is
//! answered (`proxy::record`), so admission itself counts nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::edge::EdgeDecision;
use crate::limit::rules::OnError;
use crate::limit::window::Small;
use crate::rt::clock::Nanos;
use crate::store::redis::StoreError;

/// What admission saw of one request, for `admission` to count.
#[derive(Default)]
pub(crate) struct AdmissionRecord {
    /// The edge layer's verdict, when there is an edge layer.
    pub edge: Option<EdgeDecision>,
    /// The deny list a forbidden client is on (for the debug log; never in an answer).
    pub deny_list: Option<String>,
    pub limits: LimitsSeen,
    /// The limiter's call, when the route has limits (a route without asks no store).
    pub store_call: Option<StoreCall>,
    /// The request's one clock reading.
    pub now: Nanos,
}

/// What the limits of a route decided, as the metrics count it.
#[derive(Default)]
pub(crate) enum LimitsSeen {
    /// Nothing to count: the route has no limits, none applied, or a key part was missing or
    /// repeated.
    #[default]
    Uncounted,
    Allowed {
        /// The enforced limits that were checked (indices into `Limiter::rules`).
        applied: Small<usize>,
        /// Limits the shared store could not decide, and what each did instead (`on_error`).
        degraded: Small<(usize, OnError)>,
        /// Shadow limits that would have denied.
        shadow_denied: Vec<Arc<str>>,
    },
    /// Denied by limit `rule` (the request's `refused_by`) for the hashed `identity`.
    Denied { rule: usize, identity: u128 },
    /// The shared store could not decide and the limit (the request's `refused_by`) says
    /// `on_error = "deny"`.
    Unavailable,
}

/// How long the limiter took, and the store's failure if it had one.
pub(crate) struct StoreCall {
    pub took: Duration,
    pub error: Option<StoreError>,
}
