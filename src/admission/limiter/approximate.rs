//! A route with approximate limits: their windows are decided from this gateway's leases
//! first, in process. All-or-nothing, as for exact limits: a request any enforced limit
//! denies is charged to none. So the leases are checked first (a spend is a reservation);
//! when one denies, every reservation is given back and Redis is not called; otherwise the
//! exact limits (and the approximate windows with no lease yet) make their one call, and a
//! denial there gives the reservations back. A limit whose leases have not synced for its
//! stale time follows its `on_error`.

use std::time::Duration;

use super::{Evaluated, LimitDecision, Limiter};
use crate::admission::leases::Leases;
use crate::admission::leases::sync::stale_after;
use crate::admission::shared::SharedStore;
use crate::limit::WindowCheck;
use crate::limit::lease::LeaseCheck;
use crate::limit::rules::{Consistency, Window};
use crate::limit::window::{Small, WindowRequest};
use crate::rt::clock::Nanos;
use crate::store::error::StoreError;
use crate::store::redis::Outcome;

/// A route's windows sorted by how they are decided.
#[derive(Default)]
struct Split<'w> {
    /// Decided here, from leases: the window, its origin, its check.
    local: (Small<WindowRequest>, Small<&'w Window>, Small<WindowCheck>),
    /// What the local windows that allowed spent: identity window, lease window, cost.
    spent: Small<(u128, u64, u64)>,
    /// Decided by Redis, exactly: exact limits, and approximate windows with no lease yet.
    exact: (Small<WindowRequest>, Small<&'w Window>),
    /// Approximate windows whose leases are stale: their limit's `on_error`.
    stale: (Small<WindowRequest>, Small<&'w Window>),
    stale_for: Duration,
}

impl Limiter {
    /// The path of a route with at least one approximate limit (a Redis store).
    // An `async move` block, not an `async fn`: see `proxy::handle`.
    #[expect(clippy::manual_async_fn)]
    pub(super) fn evaluate_approximate<'a>(
        &'a self,
        shared: &'a SharedStore,
        leases: &'a Leases,
        requests: Small<WindowRequest>,
        origins: Small<&'a Window>,
        cost: u64,
        now: Nanos,
    ) -> impl Future<Output = Evaluated> + 'a {
        async move {
            let split = self.split(shared, leases, requests, origins, now);
            let local = self.decide(&split.local.0, &split.local.1, &split.local.2, Small::new());
            if !matches!(local, LimitDecision::Allow { .. }) {
                release(leases, &split.spent);
                return local.into();
            }
            let mut combined = Evaluated::from(local);
            if !split.stale.0.is_empty() {
                let error = StoreError::Timeout(split.stale_for);
                let failed = Outcome {
                    checks: split.stale.0.iter().map(|_| None).collect(),
                    error: Some(error.clone()),
                };
                let fallback = self.fall_back(&split.stale.0, &split.stale.1, failed, &error, now);
                combined = merge(
                    combined,
                    Evaluated {
                        decision: fallback,
                        store_error: Some(error),
                        reservations: Vec::new(),
                    },
                );
                if !matches!(combined.decision, LimitDecision::Allow { .. }) {
                    release(leases, &split.spent);
                    return combined;
                }
            }
            if !split.exact.0.is_empty() {
                let (requests, origins) = split.exact;
                let exact = self.evaluate_shared(shared, requests, origins, cost, now);
                combined = merge(combined, Box::pin(exact).await);
            }
            if !matches!(combined.decision, LimitDecision::Allow { .. }) {
                release(leases, &split.spent);
            }
            combined
        }
    }

    /// Checks every approximate window against its lease (spending when it allows), and
    /// sorts the others out. A limit's windows whose leases deny give back what the same
    /// limit's other windows spent, as the exact script commits a limit's windows together.
    fn split<'w>(
        &self,
        shared: &SharedStore,
        leases: &Leases,
        requests: Small<WindowRequest>,
        origins: Small<&'w Window>,
        now: Nanos,
    ) -> Split<'w> {
        let mut split = Split::default();
        let timeout = shared.timeout();
        for (request, origin) in requests.into_iter().zip(origins) {
            let rule = &self.rules[request.group];
            let Consistency::Approximate { sync_interval } = rule.consistency else {
                split.exact.0.push(request);
                split.exact.1.push(origin);
                continue;
            };
            let stale_for = stale_after(sync_interval, timeout);
            if leases.is_stale(now, stale_for, request.limit_identity) {
                split.stale_for = stale_for;
                split.stale.0.push(request);
                split.stale.1.push(origin);
                continue;
            }
            let check = match leases.check(&request, &rule.name, now) {
                (LeaseCheck::NoLease, _) => {
                    split.exact.0.push(request);
                    split.exact.1.push(origin);
                    continue;
                }
                (LeaseCheck::Allow { remaining, reset }, window) => {
                    split.spent.push((request.identity, window, request.cost));
                    allowed(remaining, reset)
                }
                (
                    LeaseCheck::Deny {
                        retry_after,
                        remaining,
                        reset,
                    },
                    _,
                ) => WindowCheck::Deny {
                    retry_after,
                    remaining,
                    reset,
                },
            };
            split.local.0.push(request);
            split.local.1.push(origin);
            split.local.2.push(check);
        }
        give_back_denied_groups(leases, &mut split);
        split
    }
}

fn allowed(remaining: u64, reset: Duration) -> WindowCheck {
    WindowCheck::Allow {
        cell: [0, 0],
        remaining,
        reset,
        delay: Duration::ZERO,
    }
}

/// Gives back the spends of windows whose limit (group) another of its windows denied.
fn give_back_denied_groups(leases: &Leases, split: &mut Split) {
    let (requests, _, checks) = &split.local;
    let denied: Small<usize> = (requests.iter().zip(checks))
        .filter(|(_, check)| !check.is_allow())
        .map(|(request, _)| request.group)
        .collect();
    if denied.is_empty() {
        return;
    }
    let in_denied_group = |identity: u128| {
        (requests.iter()).any(|r| r.identity == identity && denied.contains(&r.group))
    };
    split.spent.retain(|&mut (identity, window, cost)| {
        let give_back = in_denied_group(identity);
        if give_back {
            leases.release(identity, window, cost);
        }
        !give_back
    });
}

fn release(leases: &Leases, spent: &[(u128, u64, u64)]) {
    for &(identity, window, cost) in spent {
        leases.release(identity, window, cost);
    }
}

/// Two allowed parts of one request as one decision; anything else wins over an allow.
fn merge(first: Evaluated, second: Evaluated) -> Evaluated {
    let store_error = second.store_error.or(first.store_error);
    let mut reservations = first.reservations;
    reservations.extend(second.reservations);
    let decision = match (first.decision, second.decision) {
        (
            LimitDecision::Allow {
                delay,
                mut statuses,
                mut shadow_denied,
                mut applied,
                mut degraded,
            },
            LimitDecision::Allow {
                delay: more_delay,
                statuses: more_statuses,
                shadow_denied: more_shadow,
                applied: more_applied,
                degraded: more_degraded,
            },
        ) => {
            statuses.extend(more_statuses);
            if let Some(first) = super::decision::most_restrictive(&statuses) {
                statuses.swap(0, first);
            }
            shadow_denied.extend(more_shadow);
            applied.extend(more_applied);
            degraded.extend(more_degraded);
            LimitDecision::Allow {
                delay: delay.max(more_delay),
                statuses,
                shadow_denied,
                applied,
                degraded,
            }
        }
        (LimitDecision::NotLimited, other) | (other, LimitDecision::NotLimited) => other,
        (LimitDecision::Allow { .. }, other) | (other, _) => other,
    };
    if !matches!(decision, LimitDecision::Allow { .. }) {
        reservations.clear();
    }
    Evaluated {
        decision,
        store_error,
        reservations,
    }
}
