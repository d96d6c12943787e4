//! Admission, DESIGN.md §1 steps 3–5: deny lists and the edge layer per client IP, the route's
//! concurrency cap, then every limit of the route. A refusal is a value (`respond::Refusal`)
//! the pipeline turns into its answer; an admitted request carries its slot, its rate statuses
//! and any delay.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::Runtime;
use crate::canonical::{Host, Request};
use crate::client_ip::ClientIp;
use crate::clock::Nanos;
use crate::edge::EdgeVerdict;
use crate::limit::RateStatus;
use crate::limit::key::RequestFacts;
use crate::limit::limiter::{Evaluated, LimitDecision};
use crate::limit::rules::OnError;
use crate::metrics::BackendKind;
use crate::respond::Refusal;
use crate::route::{InFlightSlot, Route};
use crate::store::Small;

pub enum Admission<'r> {
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
    },
}

pub async fn admit<'r>(
    runtime: &Runtime,
    route: &'r Route,
    request: &Request,
    client: ClientIp,
) -> Admission<'r> {
    let grouped = runtime.client_ip.group(client.ip);
    // One clock read per request, shared by every layer.
    let now = runtime.clock.now();
    if let Some(refusal) = edge_refusal(runtime, client.ip, grouped, now) {
        return Admission::Refused {
            refusal,
            by: runtime.edge.as_ref().map(|edge| edge.name().clone()),
        };
    }
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
    let deciding = timing.then(std::time::Instant::now);
    let evaluated = runtime
        .limiter
        .evaluate(&route.limits, &facts, client.ip, now)
        .await;
    if let Some(deciding) = deciding {
        record_store_call(runtime, &evaluated, deciding.elapsed());
    }
    match evaluated.decision {
        LimitDecision::NotLimited => Admission::Admitted {
            slot,
            statuses: Small::new(),
            delay: Duration::ZERO,
        },
        LimitDecision::Allow {
            delay,
            statuses,
            shadow_denied,
            applied,
            degraded,
        } => {
            // A limit decided by the local fallback counts as `fallback`, not `allowed`.
            let by_store = applied
                .iter()
                .filter(|index| !degraded.iter().any(|(d, _)| d == *index));
            for &index in by_store {
                runtime.limit_counters[index].allowed.inc();
            }
            for (index, on_error) in degraded {
                let decision = match on_error {
                    OnError::Local => "fallback",
                    OnError::Allow | OnError::Deny => "error_allowed",
                };
                runtime
                    .metrics
                    .count_limit(&runtime.limiter.rules[index].name, decision);
            }
            for limit in shadow_denied {
                runtime.metrics.count_limit(&limit, "shadow_denied");
                tracing::info!(limit = &*limit, client_ip = %client.ip, route = %route.name, "shadow limit would have denied");
            }
            Admission::Admitted {
                slot,
                statuses,
                delay,
            }
        }
        LimitDecision::Deny {
            limit,
            rule,
            identity,
            retry_after,
            statuses,
        } => {
            runtime.limit_counters[rule].denied.inc();
            runtime.metrics.limited.record(&limit, identity, now);
            let refusal = Refusal::RateLimited {
                limit: limit.clone(),
                retry_after,
                statuses,
            };
            Admission::Refused {
                refusal,
                by: Some(limit),
            }
        }
        LimitDecision::MissingKey { limit, part } => Admission::Refused {
            refusal: Refusal::MissingKey {
                limit: limit.clone(),
                part,
            },
            by: Some(limit),
        },
        LimitDecision::RepeatedKey { limit, part } => Admission::Refused {
            refusal: Refusal::RepeatedKey {
                limit: limit.clone(),
                part,
            },
            by: Some(limit),
        },
        LimitDecision::Unavailable { limit, retry_after } => {
            runtime.metrics.count_limit(&limit, "error_denied");
            let refusal = Refusal::StoreUnavailable {
                limit: limit.clone(),
                retry_after,
            };
            Admission::Refused {
                refusal,
                by: Some(limit),
            }
        }
    }
}

/// `rlp_store_duration_seconds` and `rlp_store_errors_total` (`rlp_store_breaker_open` is
/// read when scraped).
fn record_store_call(runtime: &Runtime, evaluated: &Evaluated, took: Duration) {
    runtime.store_latency.observe(took.as_secs_f64());
    let Some(redis) = &runtime.limiter.stores().redis else {
        return;
    };
    let (metrics, backend) = (&runtime.metrics, redis.backend());
    if let Some(error) = &evaluated.store_error {
        let kind = error.kind();
        metrics
            .store_errors
            .get_or_create(&BackendKind { backend, kind })
            .inc();
    }
}

/// 403 for a deny list, 429 over the edge rate.
fn edge_refusal(
    runtime: &Runtime,
    client_ip: IpAddr,
    grouped: IpAddr,
    now: Nanos,
) -> Option<Refusal<'static>> {
    let edge = runtime.edge.as_ref()?;
    let verdict = edge.check(client_ip, grouped, now);
    runtime.metrics.count_edge(&verdict);
    match verdict {
        EdgeVerdict::Allow | EdgeVerdict::Exempt => None,
        EdgeVerdict::Forbidden { list } => {
            tracing::debug!(%client_ip, list, "refused: on a deny list");
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
