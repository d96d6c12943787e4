//! Admission, docs/ARCHITECTURE.md step 5: deny lists and the edge layer per client IP, the
//! route's concurrency cap, then every limit of the route. It decides and counts nothing: a
//! refusal is a value (`respond::Refusal`) the pipeline turns into its answer, and what it saw
//! goes into the request's `AdmissionRecord`, counted once the request is answered
//! (`record.rs`). An admitted request carries its slot, its rate statuses and any delay.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admission::edge::EdgeDecision;
use crate::admission::edge::EdgeLayer;
use crate::admission::edge::EdgeVerdict;
use crate::admission::limiter::LimitDecision;
use crate::admission::limiter::Limiter;
use crate::admission::refusal::Refusal;
use crate::admission::reservation::Reservation;
use crate::admission::seen::{AdmissionRecord, LimitsSeen, StoreCall};
use crate::limit::RateStatus;
use crate::limit::key::RequestFacts;
use crate::limit::window::Small;
use crate::request::canonical::{Host, Request};
use crate::request::client_ip::ClientIp;
use crate::request::route::{InFlightSlot, Route};
use crate::rt::clock::Nanos;

pub(crate) enum Admission<'r> {
    Refused {
        refusal: Refusal<'r>,
        /// `edge` or the limit that refused, for the access log.
        by: Option<Arc<str>>,
    },
    Admitted {
        slot: Option<InFlightSlot>,
        /// For the rate-limit headers of the response: the most restrictive window first.
        statuses: Small<RateStatus>,
        /// Wait this long before forwarding (limits with action = "delay").
        delay: Duration,
        /// What the limits with a charge reserved, for the answer to settle.
        reservations: Vec<Reservation>,
    },
}

/// The layers a request passes, in order: the edge layer (when `[edge]` is set), the route's
/// concurrency cap, then the route's limits.
pub(crate) struct Gate<'g> {
    pub edge: Option<&'g EdgeLayer>,
    pub limiter: &'g Limiter,
}

/// Who asks, as admission sees them: the client's address, the same grouped by
/// `ipv6_prefix` (what edge buckets and `ip` keys count), and the request's one clock reading.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asker {
    pub client: ClientIp,
    pub grouped: IpAddr,
    pub now: Nanos,
}

impl Gate<'_> {
    /// Decides whether `request` goes on, and writes what it saw into `seen`.
    pub(crate) async fn admit<'r>(
        &self,
        route: &'r Route,
        request: &Request,
        asker: Asker,
        seen: &mut AdmissionRecord,
    ) -> Admission<'r> {
        let Asker {
            client,
            grouped,
            now,
        } = asker;
        seen.now = now;
        if let Some(edge) = self.edge {
            let verdict = edge.check(client.ip, grouped, now);
            if let Some(refusal) = edge_refusal(verdict, seen) {
                let by = Some(edge.name().clone());
                return Admission::Refused { refusal, by };
            }
        }
        self.limited(route, request, asker, seen).await
    }

    /// The route's concurrency cap and limits.
    async fn limited<'r>(
        &self,
        route: &'r Route,
        request: &Request,
        Asker {
            client,
            grouped,
            now,
        }: Asker,
        seen: &mut AdmissionRecord,
    ) -> Admission<'r> {
        let Ok(slot) = route.enter() else {
            return Admission::Refused {
                refusal: Refusal::TooBusy { route: &route.name },
                by: None,
            };
        };
        let facts = RequestFacts {
            client_ip: grouped,
            route: &route.name,
            method: &request.method,
            host: request.host.as_ref().map(Host::name),
            path: request.matched_path(),
            path_in_any_case: route.case_insensitive(),
            query: request.query(),
            fields: &request.fields,
        };
        // A route without limits asks no store: nothing to time or record.
        let timing = !route.limits.rules.is_empty();
        let deciding = timing.then(Instant::now);
        let mut evaluated = self
            .limiter
            .evaluate(&route.limits, &facts, client.ip, now)
            .await;
        if let Some(deciding) = deciding {
            let took = deciding.elapsed();
            let error = evaluated.store_error.take();
            seen.store_call = Some(StoreCall { took, error });
        }
        decided(
            evaluated.decision,
            evaluated.reservations,
            slot,
            &mut seen.limits,
        )
    }
}

/// The admission a limit decision makes, and what the metrics count of it in `seen`.
fn decided(
    decision: LimitDecision,
    reservations: Vec<Reservation>,
    slot: Option<InFlightSlot>,
    seen: &mut LimitsSeen,
) -> Admission<'static> {
    let (refusal, limit) = match decision {
        LimitDecision::NotLimited => {
            let (statuses, delay) = (Small::new(), Duration::ZERO);
            return Admission::Admitted {
                slot,
                statuses,
                delay,
                reservations,
            };
        }
        LimitDecision::Allow {
            delay,
            statuses,
            shadow_denied,
            applied,
            degraded,
        } => {
            *seen = LimitsSeen::Allowed {
                applied,
                degraded,
                shadow_denied,
            };
            return Admission::Admitted {
                slot,
                statuses,
                delay,
                reservations,
            };
        }
        LimitDecision::Deny {
            limit,
            rule,
            identity,
            retry_after,
            statuses,
        } => {
            *seen = LimitsSeen::Denied { rule, identity };
            let refusal = Refusal::RateLimited {
                limit: limit.clone(),
                retry_after,
                statuses,
            };
            (refusal, limit)
        }
        LimitDecision::MissingKey { limit, part } => {
            let refusal = Refusal::MissingKey {
                limit: limit.clone(),
                part,
            };
            (refusal, limit)
        }
        LimitDecision::RepeatedKey { limit, part } => {
            let refusal = Refusal::RepeatedKey {
                limit: limit.clone(),
                part,
            };
            (refusal, limit)
        }
        LimitDecision::Unavailable { limit, retry_after } => {
            *seen = LimitsSeen::Unavailable;
            let refusal = Refusal::StoreUnavailable {
                limit: limit.clone(),
                retry_after,
            };
            (refusal, limit)
        }
    };
    Admission::Refused {
        refusal,
        by: Some(limit),
    }
}

/// 403 for a deny list, 429 over the edge rate; the verdict goes into `seen`.
fn edge_refusal(verdict: EdgeVerdict, seen: &mut AdmissionRecord) -> Option<Refusal<'static>> {
    seen.edge = Some(EdgeDecision::of(&verdict));
    match verdict {
        EdgeVerdict::Allow | EdgeVerdict::Exempt => None,
        EdgeVerdict::Forbidden { list } => {
            seen.deny_list = Some(list);
            Some(Refusal::Forbidden)
        }
        EdgeVerdict::Limited {
            status,
            retry_after,
        } => Some(Refusal::EdgeLimited {
            status,
            retry_after,
        }),
    }
}
