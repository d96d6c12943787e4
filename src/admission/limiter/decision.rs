//! From what the store answered for each window to the limiter's decision.

use std::sync::Arc;
use std::time::Duration;

use super::{LimitDecision, Limiter};
use crate::limit::rules::{OnError, Window};
use crate::limit::window::{Small, WindowRequest};
use crate::limit::{Rate, RateStatus, WindowCheck};

impl Limiter {
    /// One pass over the checked windows: the enforced ones give the statuses (a denial's
    /// window, else the most restrictive, moved first), the shadow ones what they would have
    /// denied. It neither sorts the statuses nor collects the enforced windows first, which
    /// made every limited request measurably dearer; only the first place is promised.
    pub(super) fn decide(
        &self,
        requests: &[WindowRequest],
        origins: &[&Window],
        checks: &[WindowCheck],
        degraded: Small<(usize, OnError)>,
    ) -> LimitDecision {
        let mut statuses: Small<RateStatus> = Small::new();
        let mut worst: Option<(usize, Duration, &WindowRequest)> = None;
        let mut delay = Duration::ZERO;
        let mut applied: Small<usize> = Small::new();
        let mut shadow_denied: Vec<Arc<str>> = Vec::new();
        let mut last_shadow_denied = None;
        for ((request, window), check) in requests.iter().zip(origins).zip(checks) {
            if request.shadow {
                if !check.is_allow() && last_shadow_denied != Some(request.group) {
                    last_shadow_denied = Some(request.group);
                    shadow_denied.push(self.rules[request.group].name.clone());
                }
                continue;
            }
            match *check {
                // The last of equally long waits, as `max_by_key` picked it.
                WindowCheck::Deny { retry_after, .. }
                    if worst.is_none_or(|(_, longest, _)| retry_after >= longest) =>
                {
                    worst = Some((statuses.len(), retry_after, request));
                }
                WindowCheck::Deny { .. } => {}
                WindowCheck::Allow { delay: wait, .. } => delay = delay.max(wait),
            }
            if applied.last() != Some(&request.group) {
                applied.push(request.group);
            }
            statuses.push(status_of(window, &request.rate, check));
        }
        if let Some((i, retry_after, request)) = worst {
            statuses.swap(0, i);
            return LimitDecision::Deny {
                limit: self.rules[request.group].name.clone(),
                rule: request.group,
                identity: request.limit_identity,
                retry_after,
                statuses,
            };
        }
        if let Some(first) = most_restrictive(&statuses) {
            statuses.swap(0, first);
        }
        LimitDecision::Allow {
            applied,
            delay,
            statuses,
            shadow_denied,
            degraded,
        }
    }
}

/// Where the first of the statuses with the fewest requests remaining, then the longest
/// reset, is (`min_by` keeps the first of equals, as the stable sort this replaced did).
pub(super) fn most_restrictive(statuses: &[RateStatus]) -> Option<usize> {
    statuses
        .iter()
        .enumerate()
        .min_by(|(_, a), (_, b)| a.remaining.cmp(&b.remaining).then(b.reset.cmp(&a.reset)))
        .map(|(i, _)| i)
}

/// `rate` is the one checked: the window's own, or its local share during a store outage.
fn status_of(window: &Window, rate: &Rate, check: &WindowCheck) -> RateStatus {
    let (remaining, reset) = match *check {
        WindowCheck::Allow {
            remaining, reset, ..
        }
        | WindowCheck::Deny {
            remaining, reset, ..
        } => (remaining, reset),
    };
    let policy = if *rate == window.rate {
        window.policy.clone()
    } else {
        window.share_policy(rate)
    };
    RateStatus {
        policy,
        remaining,
        reset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Policy;
    use proptest::prelude::*;

    fn status(remaining: u64, reset_s: u64) -> RateStatus {
        RateStatus {
            policy: Arc::new(Policy::new("p", 10, Duration::from_secs(60))),
            remaining,
            reset: Duration::from_secs(reset_s),
        }
    }

    proptest! {
        /// The status put first is the one the full sort this replaced put first (a stable
        /// sort by fewest remaining, then the longest reset).
        #[test]
        fn the_most_restrictive_is_the_first_of_a_stable_sort(
            windows in proptest::collection::vec((0u64..4, 0u64..4), 0..6),
        ) {
            let statuses: Vec<RateStatus> =
                windows.iter().map(|&(remaining, reset)| status(remaining, reset)).collect();
            let mut order: Vec<usize> = (0..statuses.len()).collect();
            order.sort_by(|&a, &b| {
                let (a, b) = (&statuses[a], &statuses[b]);
                a.remaining.cmp(&b.remaining).then(b.reset.cmp(&a.reset))
            });
            prop_assert_eq!(most_restrictive(&statuses), order.first().copied());
        }
    }
}
