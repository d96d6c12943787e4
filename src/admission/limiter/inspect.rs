//! What the admin endpoints ask of the limiter, off the request path: where one identity of a
//! limit stands, and forgetting its state. The identity is named by its key parts' values and
//! hashed exactly as a request's would be (tier, policy, `missing = "ip"` stand-in); the
//! values are used for the hash and dropped, never stored or logged.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::{Limiter, policy_identity};
use crate::limit::key::{Identity, KeyPart, Missing, PartValue, window_identity};
use crate::limit::window::{Small, WindowRequest};
use crate::limit::{Policy, WindowCheck};
use crate::rt::clock::Nanos;
use crate::store::error::StoreError;

/// An identity of a limit as an operator names it.
#[derive(Debug, Default)]
pub struct NamedKey {
    /// A value for each key part given (an `ip` part's is `client_ip`, not here).
    pub values: Vec<(KeyPart, Vec<u8>)>,
    /// The client's address, as the limiter sees it after `[client_ip]` (for `ip` parts, the
    /// `missing = "ip"` stand-in, exempt lists and tiers by address).
    pub client_ip: Option<IpAddr>,
    /// `client_ip` grouped by `ipv6_prefix`, as keys use it.
    pub grouped_ip: Option<IpAddr>,
}

/// Where a named identity stands under a limit.
#[derive(Debug)]
pub struct Standing {
    pub tier: Option<String>,
    /// The exempt list holding the address: the limit does not apply.
    pub exempt_list: Option<String>,
    /// None when the limit does not apply (exempt, or an unlimited tier).
    pub identity: Option<Identity>,
    /// Each window's policy and what a request of cost 0 would meet.
    pub windows: Vec<WindowStanding>,
}

/// Where one window of an identity stands.
#[derive(Debug, Clone)]
pub struct WindowStanding {
    pub policy: Arc<Policy>,
    /// What is left of the window.
    pub remaining: u64,
    /// When the window is whole again.
    pub reset: Duration,
    /// The window is over its limit by a settled debt (refused even at cost 0), until then.
    pub debt_until: Option<Duration>,
}

/// Why a named identity cannot be looked at.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// A key part has no value, and the limit would not count such a request by address.
    #[error("no value for {part} (and {fallback})")]
    Missing { part: String, fallback: String },
    #[error("the limit store cannot answer: {0}")]
    Store(#[from] StoreError),
}

impl Limiter {
    /// Where the identity `key` names stands under limit `rule` at `now`, changing nothing.
    pub async fn standing(
        &self,
        rule: usize,
        key: &NamedKey,
        now: Nanos,
    ) -> Result<Standing, InspectError> {
        let (mut standing, requests) = self.named_windows(rule, key).await?;
        if requests.is_empty() {
            return Ok(standing);
        }
        let limits: Small<&str> = requests.iter().map(|_| &*self.rules[rule].name).collect();
        let checks = match &self.stores.shared {
            None => self.stores.memory.peek(&requests, now),
            Some(shared) => shared.peek(&requests, &limits).await?,
        };
        let windows = self.rules[rule].windows_for(standing.tier.as_deref());
        let policies = windows.unwrap_or_default().iter().map(|w| w.policy.clone());
        standing.windows = policies
            .zip(&checks)
            .map(|(policy, check)| match *check {
                WindowCheck::Allow {
                    remaining, reset, ..
                } => WindowStanding {
                    policy,
                    remaining,
                    reset,
                    debt_until: None,
                },
                WindowCheck::Deny {
                    remaining,
                    reset,
                    retry_after,
                } => WindowStanding {
                    policy,
                    remaining,
                    reset,
                    debt_until: Some(retry_after),
                },
            })
            .collect();
        Ok(standing)
    }

    /// Forgets the state of the identity `key` names under limit `rule` (its current tier's):
    /// its next request starts afresh. The standing it had no state for is returned too.
    pub async fn forget(&self, rule: usize, key: &NamedKey) -> Result<Standing, InspectError> {
        let (standing, requests) = self.named_windows(rule, key).await?;
        if requests.is_empty() {
            return Ok(standing);
        }
        // Memory too with Redis: it holds the `on_error = "local"` fallback's state.
        self.stores.memory.forget(&requests);
        if let Some(shared) = &self.stores.shared {
            let limits: Small<&str> = requests.iter().map(|_| &*self.rules[rule].name).collect();
            shared.forget(&requests, &limits).await?;
        }
        Ok(standing)
    }

    /// The identity's tier and windows under limit `rule`, as the store is asked about them
    /// (cost 0: a look, not a request).
    async fn named_windows(
        &self,
        index: usize,
        key: &NamedKey,
    ) -> Result<(Standing, Small<WindowRequest>), InspectError> {
        let rule = &self.rules[index];
        let tier = self.named_tier(key).await;
        let mut standing = Standing {
            tier: tier.clone(),
            exempt_list: None,
            identity: None,
            windows: Vec::new(),
        };
        let exempt = key.client_ip.and_then(|ip| {
            let lists = rule.exempt_lists.iter();
            lists
                .filter(|(_, ips)| ips.contains(ip))
                .map(|(name, _)| name)
                .next()
        });
        standing.exempt_list = exempt.cloned();
        let windows = match rule.windows_for(tier.as_deref()) {
            Some(windows) if exempt.is_none() => windows,
            _ => return Ok((standing, Small::new())),
        };
        let mut builder = match tier.as_deref() {
            None => self.untiered[index].clone(),
            Some(tier) => policy_identity(&self.hasher, rule, tier, windows),
        };
        for part in &rule.key {
            match (part_value(part, key), rule.missing, key.grouped_ip) {
                (Some(value), ..) => builder.add(part, &value, false),
                (None, Missing::Ip, Some(ip)) => builder.add(part, &PartValue::Ip(ip), true),
                (None, missing, _) => {
                    let fallback = match missing {
                        Missing::Ip => "no ip to count by in its place",
                        Missing::Skip => "the limit skips requests without it",
                        Missing::Deny => "the limit refuses requests without it",
                    };
                    return Err(InspectError::Missing {
                        part: part.describe(),
                        fallback: fallback.into(),
                    });
                }
            }
        }
        let identity = builder.finish();
        standing.identity = Some(identity);
        let requests = windows.iter().enumerate().map(|(w, window)| WindowRequest {
            identity: window_identity(identity, w),
            limit_identity: identity,
            algorithm: rule.algorithm,
            rate: window.rate,
            cost: 0,
            max_delay: rule.max_delay,
            group: index,
            window: w,
            shadow: false,
        });
        Ok((standing, requests.collect()))
    }

    /// The tier a request with these values would be on (see `tier_of`).
    async fn named_tier(&self, key: &NamedKey) -> Option<String> {
        let plans = self.plans.as_ref()?;
        let value = match &plans.key {
            KeyPart::Ip => key.grouped_ip.map(|ip| ip.to_string().into_bytes()),
            KeyPart::Global => Some(Vec::new()),
            part => (key.values.iter().find(|(p, _)| p == part)).map(|(_, v)| v.clone()),
        };
        if let (Some(value), Some((hash, ttl)), Some(shared)) =
            (&value, &plans.redis_hash, &self.stores.shared)
            && let Some(Some(tier)) = shared.tier(hash, *ttl, value).await
        {
            return Some(tier.to_string());
        }
        if let Some(tier) = value.and_then(|v| plans.tiers.get(&v)) {
            return Some(tier.clone());
        }
        match key.client_ip {
            Some(ip) => plans.tier_by_address(ip).map(str::to_string),
            None => plans.default.clone(),
        }
    }
}

/// The value of `part` among those named: an `ip` part's is the grouped address, `global`'s
/// is always there (empty), as a request's.
fn part_value<'a>(part: &KeyPart, key: &'a NamedKey) -> Option<PartValue<'a>> {
    match part {
        KeyPart::Ip => key.grouped_ip.map(PartValue::Ip),
        KeyPart::Global => Some(PartValue::Text(b"".as_slice().into())),
        part => {
            let (_, value) = key.values.iter().find(|(p, _)| p == part)?;
            Some(PartValue::Text(value.as_slice().into()))
        }
    }
}
