//! Evaluating a request against the limits of its route: tier, exemptions and keys first, then
//! every window of every limit checked at once in the store (all-or-nothing), then a decision.
//! With a Redis store, identities denied with a known retry time are answered in process, and
//! a failed store call falls back per limit (`on_error`).

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::admission::leases::Leases;
use crate::admission::reservation::{self, Place, Reservation};
use crate::admission::shared::SharedStore;
use crate::http1::request_fields::Repeated;
use crate::limit::key::{
    Identity, IdentityBuilder, IdentityHasher, Missing, PartValue, RequestFacts, window_identity,
};
use crate::limit::rules::{Consistency, LimitRule, OnError, Plans, Window};
use crate::limit::window::{Small, WindowRequest};
use crate::limit::{RateStatus, WindowCheck};
use crate::request::route::RouteLimits;
use crate::rt::clock::Nanos;
use crate::store::error::StoreError;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;

mod approximate;
mod decision;
mod inspect;
mod shared_store;
#[cfg(test)]
mod tests;

pub(crate) use inspect::{InspectError, NamedKey, Standing};

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
    /// What an allowed request reserved of the limits that settle by their answer.
    pub(crate) reservations: Vec<Reservation>,
}

impl From<LimitDecision> for Evaluated {
    fn from(decision: LimitDecision) -> Self {
        Evaluated {
            decision,
            store_error: None,
            reservations: Vec::new(),
        }
    }
}

/// Where limit state lives: always memory (alone, or as the `on_error = "local"` fallback),
/// and Redis when configured.
#[derive(Clone)]
pub struct Stores {
    pub memory: Arc<MemoryStore>,
    /// Where a fleet counts: Redis, when configured.
    pub shared: Option<SharedStore>,
    /// The local fallback enforces each limit divided by this.
    pub fallback_instances: u64,
    /// The leases of approximate limits (with a Redis store, when a limit is approximate).
    pub leases: Option<Arc<Leases>>,
}

impl Stores {
    /// The Redis store, when the shared store is Redis.
    pub fn redis(&self) -> Option<&Arc<RedisStore>> {
        self.shared.as_ref().and_then(SharedStore::redis)
    }
}

pub struct Limiter {
    pub rules: Vec<LimitRule>,
    pub plans: Option<Plans>,
    hasher: IdentityHasher,
    /// Per rule, the identity hashed as far as the limit and its policy for requests without
    /// a tier: the same for all of them, so it is hashed once here and cloned per request.
    untiered: Box<[IdentityBuilder]>,
    stores: Stores,
    /// Whether any limit has a `charge`: only then are reservations kept.
    charged: bool,
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
        let charged = rules.iter().any(|rule| rule.charge.is_some());
        Limiter {
            rules,
            plans,
            hasher,
            untiered,
            stores,
            charged,
        }
    }

    /// The stores, for a reloaded limiter to keep the state of limits whose rates did not
    /// change (and the Redis connection).
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The `backend` label of store metrics.
    pub fn backend(&self) -> &'static str {
        self.stores
            .shared
            .as_ref()
            .map_or("memory", |s| s.backend())
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
        let tier = match self.tier_of(facts, client_ip).await {
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
            let (windows, identity) = match self.applied_windows(index, tier, facts, client_ip) {
                Ok(Some(applied)) => applied,
                Ok(None) => continue,
                Err(problem) => return problem.refusal(&self.rules[index].name).into(),
            };
            let rule = &self.rules[index];
            for (w, window) in windows.iter().enumerate() {
                requests.push(WindowRequest {
                    identity: window_identity(identity, w),
                    limit_identity: identity,
                    algorithm: rule.algorithm,
                    rate: window.rate,
                    cost: rule.reserve(route.cost),
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
        match &self.stores.shared {
            None => {
                let checks = self.stores.memory.check_all(&requests, now);
                let decision = self.decide(&requests, &origins, &checks, Small::new());
                let reservations =
                    self.reservations(&decision, &requests, &checks, |_| Place::Memory { at: now });
                Evaluated {
                    decision,
                    store_error: None,
                    reservations,
                }
            }
            Some(shared) => {
                if let Some(leases) = self.stores.leases.as_deref()
                    && (requests.iter()).any(|r| {
                        matches!(
                            self.rules[r.group].consistency,
                            Consistency::Approximate { .. }
                        )
                    })
                {
                    let approximate = self
                        .evaluate_approximate(shared, leases, requests, origins, route.cost, now);
                    return Box::pin(approximate).await;
                }
                // Boxed, and owning its lists: every request's future (memory store or none)
                // would otherwise be as large as the Redis call's.
                let shared = self.evaluate_shared(shared, requests, origins, route.cost, now);
                Box::pin(shared).await
            }
        }
    }

    /// What an allowed request reserved of the limits with a charge (nothing, and no work,
    /// when no limit has one).
    fn reservations(
        &self,
        decision: &LimitDecision,
        requests: &[WindowRequest],
        checks: &[WindowCheck],
        place: impl Fn(usize) -> Place,
    ) -> Vec<Reservation> {
        if !self.charged || !matches!(decision, LimitDecision::Allow { .. }) {
            return Vec::new();
        }
        let charged = |group: usize| self.rules[group].charge.is_some();
        reservation::committed(requests, checks, charged, place)
    }

    /// The windows of limit `index` a request meets, and its identity under them; None when
    /// the limit does not apply to it (an exempt address, an unlimited tier, or a key part
    /// missing that the limit skips).
    fn applied_windows(
        &self,
        index: usize,
        tier: Option<&str>,
        facts: &RequestFacts<'_>,
        client_ip: IpAddr,
    ) -> Result<Option<(&[Window], Identity)>, KeyProblem> {
        let rule = &self.rules[index];
        if rule
            .exempt_lists
            .iter()
            .any(|(_, ips)| ips.contains(client_ip))
        {
            return Ok(None);
        }
        let Some(windows) = rule.windows_for(tier) else {
            return Ok(None);
        };
        let builder = match tier {
            None => self.untiered[index].clone(),
            Some(tier) => policy_identity(&self.hasher, rule, tier, windows),
        };
        let identity = identity(builder, rule, facts)?;
        Ok(identity.map(|builder| (windows, builder.finish())))
    }

    /// The request's tier: named for its `[plans] key` by the Redis hash or the plans file,
    /// else given by the first `[plans] lists` list holding `client_ip`, else the default.
    async fn tier_of<'a>(
        &'a self,
        facts: &RequestFacts<'_>,
        client_ip: IpAddr,
    ) -> Result<Option<TierName<'a>>, Repeated> {
        let Some(plans) = self.plans.as_ref() else {
            return Ok(None);
        };
        let value = match facts.value(&plans.key)? {
            Some(PartValue::Text(bytes)) => Some(bytes),
            Some(PartValue::Ip(ip)) => Some(Cow::Owned(ip.to_string().into_bytes())),
            None => None,
        };
        if let (Some(value), Some((hash, ttl)), Some(shared)) =
            (&value, &plans.redis_hash, &self.stores.shared)
            && let Some(Some(tier)) = Box::pin(shared.tier(hash, *ttl, value)).await
        {
            return Ok(Some(TierName::Fetched(tier)));
        }
        if let Some(tier) = value.and_then(|v| plans.tiers.get(v.as_ref())) {
            return Ok(Some(TierName::Configured(tier)));
        }
        Ok(plans.tier_by_address(client_ip).map(TierName::Configured))
    }
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

impl KeyProblem {
    /// The refusal of a request with this problem under limit `limit`.
    fn refusal(self, limit: &Arc<str>) -> LimitDecision {
        match self {
            KeyProblem::Missing(part) => LimitDecision::MissingKey {
                limit: limit.clone(),
                part,
            },
            KeyProblem::Repeated(part) => LimitDecision::RepeatedKey {
                limit: limit.clone(),
                part,
            },
        }
    }
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
