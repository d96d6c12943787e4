//! Evaluating a request against the limits of its route: tier, exemptions and keys first, then
//! every window of every limit checked at once in the store (all-or-nothing), then a decision.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::key::{
    IdentityBuilder, IdentityHasher, Missing, PartValue, RequestFacts, window_identity,
};
use super::rules::{LimitRule, Plans, Window};
use super::{RateStatus, WindowCheck};
use crate::clock::Nanos;
use crate::store::memory::MemoryStore;
use crate::store::{Small, WindowRequest};

/// The limits a route applies.
#[derive(Debug, Clone, Default)]
pub struct RouteLimits {
    /// Indices into `Limiter::rules`.
    pub rules: Vec<usize>,
    pub cost: u64,
}

/// The limiter's verdict. A denial is a value, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitDecision {
    /// No limit applied (none configured, exempt, skipped or unlimited).
    NotLimited,
    Allow {
        /// Hold the request this long first (limits with action = "delay").
        delay: Duration,
        /// The most restrictive window first, then the others.
        statuses: Vec<RateStatus>,
        /// Shadow limits that would have denied.
        shadow_denied: Vec<Arc<str>>,
        /// The enforced limits that were checked (indices into `Limiter::rules`).
        applied: Small<usize>,
    },
    Deny {
        limit: Arc<str>,
        /// The hashed identity that was denied (never the raw key).
        identity: u128,
        retry_after: Duration,
        /// The window that holds the request back longest first, then the others.
        statuses: Vec<RateStatus>,
    },
    /// A key part was absent and the limit says `missing = "deny"`.
    MissingKey { limit: Arc<str>, part: String },
}

pub struct Limiter {
    pub rules: Vec<LimitRule>,
    pub plans: Option<Plans>,
    hasher: IdentityHasher,
    store: Arc<MemoryStore>,
}

impl Limiter {
    pub fn new(
        rules: Vec<LimitRule>,
        plans: Option<Plans>,
        hash_secret: Option<&str>,
        store: Arc<MemoryStore>,
    ) -> Limiter {
        Limiter {
            rules,
            plans,
            hasher: IdentityHasher::new(hash_secret),
            store,
        }
    }

    /// The store, for a reloaded limiter to keep the state of limits whose rates did not change.
    pub fn store(&self) -> &Arc<MemoryStore> {
        &self.store
    }

    /// Decides on a request. `client_ip` is the real address (for exempt lists); `facts` carry
    /// the grouped one (for keys).
    pub fn evaluate(
        &self,
        route: &RouteLimits,
        facts: &RequestFacts<'_>,
        client_ip: IpAddr,
        now: Nanos,
    ) -> LimitDecision {
        if route.rules.is_empty() {
            return LimitDecision::NotLimited;
        }
        let tier = self.tier_of(facts);
        // Parallel lists: what the store checks, and which window each came from.
        let mut requests: Small<WindowRequest> = Small::new();
        let mut origins: Small<&Window> = Small::new();
        for &index in &route.rules {
            let rule = &self.rules[index];
            if rule
                .exempt_lists
                .iter()
                .any(|(_, ips)| ips.contains(client_ip))
            {
                continue;
            }
            let Some(windows) = rule.windows_for(tier) else {
                continue;
            };
            let identity = match self.identity(rule, tier.unwrap_or(""), windows, facts) {
                Ok(Some(builder)) => builder.finish(),
                Ok(None) => continue,
                Err(part) => {
                    return LimitDecision::MissingKey {
                        limit: rule.name.clone(),
                        part,
                    };
                }
            };
            for (w, window) in windows.iter().enumerate() {
                requests.push(WindowRequest {
                    identity: window_identity(identity, w),
                    limit_identity: identity,
                    algorithm: rule.algorithm,
                    rate: window.rate,
                    cost: route.cost,
                    max_delay: rule.max_delay,
                    group: index,
                    shadow: rule.shadow,
                });
                origins.push(window);
            }
        }
        if requests.is_empty() {
            return LimitDecision::NotLimited;
        }
        let checks = self.store.check_all(&requests, now);
        self.decide(&requests, &origins, &checks)
    }

    fn tier_of<'a>(&'a self, facts: &RequestFacts<'_>) -> Option<&'a str> {
        let plans = self.plans.as_ref()?;
        let tier = match facts.value(&plans.key) {
            Some(PartValue::Text(bytes)) => plans.tiers.get(bytes),
            Some(PartValue::Ip(ip)) => plans.tiers.get(ip.to_string().as_bytes()),
            None => None,
        };
        tier.or(plans.default.as_ref()).map(String::as_str)
    }

    /// The identity builder for `rule`; Ok(None) when a part is missing and the rule skips.
    fn identity(
        &self,
        rule: &LimitRule,
        tier: &str,
        windows: &[Window],
        facts: &RequestFacts<'_>,
    ) -> Result<Option<IdentityBuilder>, String> {
        let mut builder = self.hasher.start(&rule.name, tier);
        let rates = windows
            .iter()
            .map(|w| (w.rate.limit, w.rate.per_ns(), w.rate.burst));
        builder.add_policy(rule.algorithm.name(), rates);
        for part in &rule.key {
            match facts.value(part) {
                Some(value) => builder.add(part, &value, false),
                None => match rule.missing {
                    Missing::Ip => builder.add(part, &PartValue::Ip(facts.client_ip), true),
                    Missing::Skip => return Ok(None),
                    Missing::Deny => return Err(part.describe()),
                },
            }
        }
        Ok(Some(builder))
    }

    fn decide(
        &self,
        requests: &[WindowRequest],
        origins: &[&Window],
        checks: &[WindowCheck],
    ) -> LimitDecision {
        let windows = || {
            requests
                .iter()
                .zip(origins)
                .zip(checks)
                .map(|((r, o), c)| (r, *o, c))
        };
        let enforced: Small<(&WindowRequest, &Window, &WindowCheck)> =
            windows().filter(|(r, _, _)| !r.shadow).collect();
        let mut statuses: Vec<RateStatus> = enforced
            .iter()
            .map(|(_, window, check)| status_of(window, check))
            .collect();
        let worst = enforced
            .iter()
            .enumerate()
            .filter_map(|(i, (_, _, check))| match check {
                WindowCheck::Deny { retry_after, .. } => Some((i, *retry_after)),
                WindowCheck::Allow { .. } => None,
            })
            .max_by_key(|(_, retry_after)| *retry_after);
        if let Some((i, retry_after)) = worst {
            statuses.swap(0, i);
            let limit = self.rules[enforced[i].0.group].name.clone();
            return LimitDecision::Deny {
                limit,
                identity: enforced[i].0.limit_identity,
                retry_after,
                statuses,
            };
        }
        // Most restrictive first: fewest remaining, then the longest reset.
        statuses.sort_by(|a, b| a.remaining.cmp(&b.remaining).then(b.reset.cmp(&a.reset)));
        let delay = enforced
            .iter()
            .filter_map(|(_, _, check)| match check {
                WindowCheck::Allow { delay, .. } => Some(*delay),
                WindowCheck::Deny { .. } => None,
            })
            .max()
            .unwrap_or_default();
        let mut shadow_denied: Vec<Arc<str>> = windows()
            .filter(|(r, _, c)| r.shadow && !c.is_allow())
            .map(|(r, _, _)| self.rules[r.group].name.clone())
            .collect();
        shadow_denied.dedup();
        let mut applied: Small<usize> = enforced.iter().map(|(r, _, _)| r.group).collect();
        applied.dedup();
        LimitDecision::Allow {
            applied,
            delay,
            statuses,
            shadow_denied,
        }
    }
}

fn status_of(window: &Window, check: &WindowCheck) -> RateStatus {
    let (remaining, reset) = match *check {
        WindowCheck::Allow {
            remaining, reset, ..
        }
        | WindowCheck::Deny {
            remaining, reset, ..
        } => (remaining, reset),
    };
    RateStatus {
        policy: window.policy.clone(),
        limit: window.rate.limit,
        window: window.rate.per,
        remaining,
        reset,
    }
}
