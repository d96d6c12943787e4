//! The shared store's path: a denial Redis gave earlier that still stands, else one call,
//! else each limit's `on_error` for the windows the store could not check.

use std::time::{Duration, Instant};

use super::{Evaluated, LimitDecision, Limiter};
use crate::admission::reservation::Place;
use crate::admission::shared::SharedStore;
use crate::limit::rules::{OnError, Window};
use crate::limit::window::{Small, WindowRequest};
use crate::limit::{Rate, WindowCheck};
use crate::rt::clock::Nanos;
use crate::store::denied::Denied;
use crate::store::error::StoreError;
use crate::store::redis::Outcome;

impl Limiter {
    /// The Redis path: a standing denial, else one call, else the fallback.
    // An `async move` block, not an `async fn`: see `proxy::handle`.
    #[expect(clippy::manual_async_fn)]
    pub(super) fn evaluate_shared(
        &self,
        shared: &SharedStore,
        requests: Small<WindowRequest>,
        origins: Small<&Window>,
        cost: u64,
        now: Nanos,
    ) -> impl Future<Output = Evaluated> {
        async move {
            let (requests, origins) = (&requests[..], &origins[..]);
            if let Some(denial) = self.standing_denial(shared, requests, now) {
                return denial.into();
            }
            let limits: Small<&str> = requests
                .iter()
                .map(|r| &*self.rules[r.group].name)
                .collect();
            // Only a route's charged limits need to know when their reservation was made.
            let sent = self.charged.then(Instant::now);
            let outcome = shared.check_all(requests, &limits).await;
            let replied = sent.map(|_| Instant::now());
            let Some(error) = outcome.error.clone() else {
                let checks: Small<WindowCheck> = outcome.checks.into_iter().flatten().collect();
                let decision = self.decide(requests, origins, &checks, Small::new());
                let reservations = match sent.zip(replied) {
                    Some((sent, replied)) => {
                        let place = |_| Place::Shared { sent, replied };
                        self.reservations(&decision, requests, &checks, place)
                    }
                    None => Vec::new(),
                };
                if let LimitDecision::Deny {
                    limit,
                    identity,
                    retry_after,
                    statuses,
                    ..
                } = &decision
                {
                    let denial = Denied {
                        limit: limit.clone(),
                        retry_after: *retry_after,
                        statuses: statuses.clone(),
                    };
                    // The denied limit's own cost: its reserve, if it has a charge.
                    let cost = (requests.iter())
                        .find(|r| r.limit_identity == *identity)
                        .map_or(cost, |r| r.cost);
                    shared.denied().remember(*identity, cost, &denial, now);
                }
                return Evaluated {
                    decision,
                    store_error: None,
                    reservations,
                };
            };
            Evaluated {
                decision: self.fall_back(requests, origins, outcome, &error, now),
                store_error: Some(error),
                reservations: Vec::new(),
            }
        }
    }

    /// A denial the shared store gave earlier that still stands for one of the enforced limits.
    fn standing_denial(
        &self,
        shared: &SharedStore,
        requests: &[WindowRequest],
        now: Nanos,
    ) -> Option<LimitDecision> {
        let mut previous = None;
        for request in requests.iter().filter(|r| !r.shadow) {
            if previous == Some(request.limit_identity) {
                continue;
            }
            previous = Some(request.limit_identity);
            if let Some(denied) = shared
                .denied()
                .lookup(request.limit_identity, request.cost, now)
            {
                return Some(LimitDecision::Deny {
                    limit: denied.limit,
                    rule: request.group,
                    identity: request.limit_identity,
                    retry_after: denied.retry_after,
                    statuses: denied.statuses,
                });
            }
        }
        None
    }

    /// Decides without the windows the store could not check, per their limit's `on_error`:
    /// allow drops the limit, deny refuses the request, local checks the limit divided by
    /// `fallback_instances` in this process. Windows the store did check (a cluster's other
    /// identities) keep their answers.
    pub(super) fn fall_back(
        &self,
        requests: &[WindowRequest],
        origins: &[&Window],
        outcome: Outcome,
        error: &StoreError,
        now: Nanos,
    ) -> LimitDecision {
        let mut checked: (Small<WindowRequest>, Small<&Window>, Small<WindowCheck>) =
            Default::default();
        let mut local: (Small<WindowRequest>, Small<&Window>) = Default::default();
        let mut degraded: Small<(usize, OnError)> = Small::new();
        for ((request, origin), check) in requests.iter().zip(origins).zip(outcome.checks) {
            if let Some(check) = check {
                checked.0.push(request.clone());
                checked.1.push(origin);
                checked.2.push(check);
                continue;
            }
            if request.shadow {
                continue;
            }
            let rule = &self.rules[request.group];
            if !degraded.iter().any(|(g, _)| *g == request.group) {
                degraded.push((request.group, rule.on_error));
            }
            match rule.on_error {
                OnError::Allow => {}
                OnError::Deny => {
                    return LimitDecision::Unavailable {
                        limit: rule.name.clone(),
                        retry_after: error.retry_in(),
                    };
                }
                OnError::Local => {
                    local.0.push(WindowRequest {
                        rate: divided(&request.rate, self.stores.fallback_instances),
                        ..request.clone()
                    });
                    local.1.push(origin);
                }
            }
        }
        let denied_already = checked
            .0
            .iter()
            .zip(&checked.2)
            .any(|(r, c)| !r.shadow && !c.is_allow());
        if !denied_already && !local.0.is_empty() {
            let local_checks = self.stores.memory.check_all(&local.0, now);
            checked.0.extend(local.0);
            checked.1.extend(local.1);
            checked.2.extend(local_checks);
        }
        if checked.0.is_empty() {
            return LimitDecision::Allow {
                delay: Duration::ZERO,
                statuses: Small::new(),
                shadow_denied: Vec::new(),
                applied: Small::new(),
                degraded,
            };
        }
        self.decide(&checked.0, &checked.1, &checked.2, degraded)
    }
}

/// A limit's share in one of `instances` gateways that each enforce it alone.
fn divided(rate: &Rate, instances: u64) -> Rate {
    Rate {
        limit: (rate.limit / instances).max(1),
        burst: (rate.burst / instances).max(1),
        per: rate.per,
    }
}
