//! Evaluating a request against the limits of its route: tier, exemptions and keys first, then
//! every window of every limit checked at once in the store (all-or-nothing), then a decision.
//! With a Redis store, identities denied with a known retry time are answered in process, and
//! a failed store call falls back per limit (`on_error`).

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::key::{
    IdentityBuilder, IdentityHasher, Missing, PartValue, RequestFacts, window_identity,
};
use super::rules::{LimitRule, OnError, Plans, Window};
use super::{Rate, RateStatus, WindowCheck};
use crate::clock::Nanos;
use crate::request_fields::Repeated;
use crate::store::denied::Denied;
use crate::store::memory::MemoryStore;
use crate::store::redis::{Outcome, RedisStore, StoreError};
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
        statuses: Small<RateStatus>,
        /// Shadow limits that would have denied.
        shadow_denied: Vec<Arc<str>>,
        /// The enforced limits that were checked (indices into `Limiter::rules`).
        applied: Small<usize>,
        /// Limits the shared store could not decide, and what each did instead (`on_error`).
        degraded: Small<(usize, OnError)>,
    },
    Deny {
        limit: Arc<str>,
        /// The limit's index into `Limiter::rules`.
        rule: usize,
        /// The hashed identity that was denied (never the raw key).
        identity: u128,
        retry_after: Duration,
        /// The window that holds the request back longest first, then the others.
        statuses: Small<RateStatus>,
    },
    /// A key part was absent and the limit says `missing = "deny"`.
    MissingKey { limit: Arc<str>, part: String },
    /// The request carries a key part more than once (a 400: which one the upstream reads is
    /// not known).
    RepeatedKey { limit: Arc<str>, part: String },
    /// The shared store could not decide and the limit says `on_error = "deny"`.
    Unavailable {
        limit: Arc<str>,
        retry_after: Duration,
    },
}

/// A decision, and the store failure behind it if there was one (for metrics and logs).
#[derive(Debug)]
pub struct Evaluated {
    pub decision: LimitDecision,
    pub store_error: Option<StoreError>,
}

impl From<LimitDecision> for Evaluated {
    fn from(decision: LimitDecision) -> Self {
        Evaluated {
            decision,
            store_error: None,
        }
    }
}

/// Where limit state lives: always memory (alone, or as the `on_error = "local"` fallback),
/// and Redis when configured.
#[derive(Clone)]
pub struct Stores {
    pub memory: Arc<MemoryStore>,
    pub redis: Option<Arc<RedisStore>>,
    /// The local fallback enforces each limit divided by this.
    pub fallback_instances: u64,
}

pub struct Limiter {
    pub rules: Vec<LimitRule>,
    pub plans: Option<Plans>,
    hasher: IdentityHasher,
    /// Per rule, the identity hashed as far as the limit and its policy for requests without
    /// a tier: the same for all of them, so it is hashed once here and cloned per request.
    untiered: Box<[IdentityBuilder]>,
    stores: Stores,
}

impl Limiter {
    pub fn new(
        rules: Vec<LimitRule>,
        plans: Option<Plans>,
        hash_secret: Option<&str>,
        stores: Stores,
    ) -> Limiter {
        let hasher = IdentityHasher::new(hash_secret);
        let untiered = rules
            .iter()
            .map(|rule| policy_identity(&hasher, rule, "", &rule.windows))
            .collect();
        Limiter {
            rules,
            plans,
            hasher,
            untiered,
            stores,
        }
    }

    /// The stores, for a reloaded limiter to keep the state of limits whose rates did not
    /// change (and the Redis connection).
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The `backend` label of store metrics.
    pub fn backend(&self) -> &'static str {
        self.stores.redis.as_ref().map_or("memory", |r| r.backend())
    }

    /// Decides on a request. `client_ip` is the real address (for exempt lists); `facts` carry
    /// the grouped one (for keys).
    pub async fn evaluate(
        &self,
        route: &RouteLimits,
        facts: &RequestFacts<'_>,
        client_ip: IpAddr,
        now: Nanos,
    ) -> Evaluated {
        if route.rules.is_empty() {
            return LimitDecision::NotLimited.into();
        }
        let tier = match self.tier_of(facts).await {
            Ok(tier) => tier,
            Err(Repeated) => {
                let plans = self.plans.as_ref().map(|plans| plans.key.describe());
                return LimitDecision::RepeatedKey {
                    limit: Arc::from("plans"),
                    part: plans.unwrap_or_default(),
                }
                .into();
            }
        };
        let tier = tier.as_deref();
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
            let builder = match tier {
                None => self.untiered[index].clone(),
                Some(tier) => policy_identity(&self.hasher, rule, tier, windows),
            };
            let identity = match identity(builder, rule, facts) {
                Ok(Some(builder)) => builder.finish(),
                Ok(None) => continue,
                Err(KeyProblem::Missing(part)) => {
                    return LimitDecision::MissingKey {
                        limit: rule.name.clone(),
                        part,
                    }
                    .into();
                }
                Err(KeyProblem::Repeated(part)) => {
                    return LimitDecision::RepeatedKey {
                        limit: rule.name.clone(),
                        part,
                    }
                    .into();
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
                    window: w,
                    shadow: rule.shadow,
                });
                origins.push(window);
            }
        }
        if requests.is_empty() {
            return LimitDecision::NotLimited.into();
        }
        match &self.stores.redis {
            None => {
                let checks = self.stores.memory.check_all(&requests, now);
                self.decide(&requests, &origins, &checks, Small::new())
                    .into()
            }
            Some(redis) => {
                // Boxed, and owning its lists: every request's future (memory store or none)
                // would otherwise be as large as the Redis call's.
                let shared = self.evaluate_shared(redis, requests, origins, route.cost, now);
                Box::pin(shared).await
            }
        }
    }

    /// The Redis path: a standing denial, else one call, else the fallback.
    // An `async move` block, not an `async fn`: see `proxy::handle`.
    #[expect(clippy::manual_async_fn)]
    fn evaluate_shared(
        &self,
        redis: &RedisStore,
        requests: Small<WindowRequest>,
        origins: Small<&Window>,
        cost: u64,
        now: Nanos,
    ) -> impl Future<Output = Evaluated> {
        async move {
            let (requests, origins) = (&requests[..], &origins[..]);
            if let Some(denial) = self.standing_denial(redis, requests, cost, now) {
                return denial.into();
            }
            let limits: Small<&str> = requests
                .iter()
                .map(|r| &*self.rules[r.group].name)
                .collect();
            let outcome = redis.check_all(requests, &limits, None).await;
            let Some(error) = outcome.error.clone() else {
                let checks: Small<WindowCheck> = outcome.checks.into_iter().flatten().collect();
                let decision = self.decide(requests, origins, &checks, Small::new());
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
                    redis.denied.remember(*identity, cost, &denial, now);
                }
                return decision.into();
            };
            Evaluated {
                decision: self.fall_back(requests, origins, outcome, &error, now),
                store_error: Some(error),
            }
        }
    }

    /// A denial the shared store gave earlier that still stands for one of the enforced limits.
    fn standing_denial(
        &self,
        redis: &RedisStore,
        requests: &[WindowRequest],
        cost: u64,
        now: Nanos,
    ) -> Option<LimitDecision> {
        let mut previous = None;
        for request in requests.iter().filter(|r| !r.shadow) {
            if previous == Some(request.limit_identity) {
                continue;
            }
            previous = Some(request.limit_identity);
            if let Some(denied) = redis.denied.lookup(request.limit_identity, cost, now) {
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
    fn fall_back(
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

    async fn tier_of<'a>(
        &'a self,
        facts: &RequestFacts<'_>,
    ) -> Result<Option<TierName<'a>>, Repeated> {
        let Some(plans) = self.plans.as_ref() else {
            return Ok(None);
        };
        let value = match facts.value(&plans.key)? {
            Some(PartValue::Text(bytes)) => Some(bytes),
            Some(PartValue::Ip(ip)) => Some(Cow::Owned(ip.to_string().into_bytes())),
            None => None,
        };
        if let (Some(value), Some((hash, ttl)), Some(redis)) =
            (&value, &plans.redis_hash, &self.stores.redis)
            && let Some(Some(tier)) = Box::pin(redis.tier(hash, *ttl, value)).await
        {
            return Ok(Some(TierName::Fetched(tier)));
        }
        let tier = value.and_then(|v| plans.tiers.get(v.as_ref()));
        Ok(tier
            .or(plans.default.as_ref())
            .map(|t| TierName::Configured(t)))
    }

    /// One pass over the checked windows: the enforced ones give the statuses (a denial's
    /// window, else the most restrictive, moved first), the shadow ones what they would have
    /// denied. Sorting the statuses and collecting the enforced windows first cost a request
    /// under two limits ~0.5k instructions; only the first place is promised.
    fn decide(
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
fn most_restrictive(statuses: &[RateStatus]) -> Option<usize> {
    statuses
        .iter()
        .enumerate()
        .min_by(|(_, a), (_, b)| a.remaining.cmp(&b.remaining).then(b.reset.cmp(&a.reset)))
        .map(|(i, _)| i)
}

/// The identity hashed as far as limit `rule` (for `tier`) and its policy: what the state of
/// its windows means, so a limit whose rates change gets fresh state.
fn policy_identity(
    hasher: &IdentityHasher,
    rule: &LimitRule,
    tier: &str,
    windows: &[Window],
) -> IdentityBuilder {
    let mut builder = hasher.start(&rule.name, tier);
    let rates = windows
        .iter()
        .map(|w| (w.rate.limit, w.rate.per_ns(), w.rate.burst));
    builder.add_policy(rule.algorithm.name(), rates);
    builder
}

/// Why a request has no identity under a limit: the part it names.
enum KeyProblem {
    /// Absent, and the limit says `missing = "deny"`.
    Missing(String),
    /// Given more than once.
    Repeated(String),
}

/// Completes `builder` with the request's key parts; Ok(None) when a part is missing and the
/// rule skips.
fn identity(
    mut builder: IdentityBuilder,
    rule: &LimitRule,
    facts: &RequestFacts<'_>,
) -> Result<Option<IdentityBuilder>, KeyProblem> {
    for part in &rule.key {
        let value = facts
            .value(part)
            .map_err(|Repeated| KeyProblem::Repeated(part.describe()))?;
        match value {
            Some(value) => builder.add(part, &value, false),
            None => match rule.missing {
                Missing::Ip => builder.add(part, &PartValue::Ip(facts.client_ip), true),
                Missing::Skip => return Ok(None),
                Missing::Deny => return Err(KeyProblem::Missing(part.describe())),
            },
        }
    }
    Ok(Some(builder))
}

/// A tier from the plans file (borrowed) or from the Redis hash (shared with its cache).
enum TierName<'a> {
    Configured(&'a str),
    Fetched(Arc<str>),
}

impl std::ops::Deref for TierName<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            TierName::Configured(name) => name,
            TierName::Fetched(name) => name,
        }
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
