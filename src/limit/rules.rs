//! A limit as configured and validated: its key, algorithm, windows, tiers and actions.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::charge::Charge;
use super::key::{KeyPart, Missing};
use super::{Algorithm, Policy, Rate};
use crate::request::ip_set::IpSet;

/// One window of a limit, with the policy it is told as (`per-key`, or `per-key-1d` when the
/// limit has several windows).
#[derive(Debug, Clone)]
pub struct Window {
    pub rate: Rate,
    pub policy: Arc<Policy>,
    /// Its local share during a store outage, as told: made by the first request that needs
    /// it, not for every request of an outage.
    share_policy: OnceLock<Arc<Policy>>,
}

impl Window {
    pub fn new(rate: Rate, name: &str) -> Window {
        Window {
            rate,
            policy: Policy::of(name, &rate),
            share_policy: OnceLock::new(),
        }
    }

    /// The policy of `share`, this window's local share of its rate during a store outage
    /// (the same share for every request of one config; another is made afresh).
    pub fn share_policy(&self, share: &Rate) -> Arc<Policy> {
        let made = (self.share_policy).get_or_init(|| Policy::of(&self.policy.name, share));
        if (made.limit, made.window) == (share.limit, share.per) {
            made.clone()
        } else {
            Policy::of(&self.policy.name, share)
        }
    }
}

#[derive(Debug, Clone)]
pub enum Tier {
    Unlimited,
    Windows(Vec<Window>),
}

/// What a limit does when the store fails (used by the Redis store; memory cannot fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    Allow,
    Deny,
    Local,
}

/// How a limit is counted with a Redis store: a script call per request (`Exact`), or
/// decided in process from leases synced every `sync_interval` (`Approximate`, see
/// `limiter/approximate.rs`). The memory store is exact either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consistency {
    #[default]
    Exact,
    Approximate {
        sync_interval: Duration,
    },
}

#[derive(Debug, Clone)]
pub struct LimitRule {
    pub name: Arc<str>,
    pub key: Vec<KeyPart>,
    pub missing: Missing,
    pub algorithm: Algorithm,
    pub windows: Vec<Window>,
    pub tiers: HashMap<String, Tier>,
    /// Evaluate and report, never deny.
    pub shadow: bool,
    /// Zero: reject over the limit. Otherwise hold the request up to this long instead.
    pub max_delay: Duration,
    pub exempt_lists: Vec<(String, Arc<IpSet>)>,
    pub on_error: OnError,
    pub consistency: Consistency,
    /// Reserved at admission and settled by the answer; None: the route's cost, kept.
    pub charge: Option<Charge>,
}

impl LimitRule {
    /// The units a request reserves in each window: the charge's `reserve`, else the route's
    /// `cost`.
    pub fn reserve(&self, route_cost: u64) -> u64 {
        self.charge
            .as_ref()
            .and_then(|charge| charge.reserve)
            .unwrap_or(route_cost)
    }

    /// The windows that apply for `tier`, or None when the tier is unlimited.
    pub fn windows_for(&self, tier: Option<&str>) -> Option<&[Window]> {
        match tier.and_then(|t| self.tiers.get(t)) {
            Some(Tier::Unlimited) => None,
            Some(Tier::Windows(windows)) => Some(windows),
            None => Some(&self.windows),
        }
    }

    /// The most windows this limit applies to one request, on any tier.
    pub fn most_windows(&self) -> usize {
        let tiers = self.tiers.values().map(|t| match t {
            Tier::Windows(w) => w.len(),
            Tier::Unlimited => 0,
        });
        tiers.fold(self.windows.len(), usize::max)
    }

    /// Every window this limit may apply, base and tiers, for config checks.
    pub fn all_windows(&self) -> impl Iterator<Item = &Window> {
        let tiers = self.tiers.values().filter_map(|t| match t {
            Tier::Windows(w) => Some(w.iter()),
            Tier::Unlimited => None,
        });
        self.windows.iter().chain(tiers.flatten())
    }
}

/// Which tier an identity is on: by name (the Redis hash, then the plans file's `identity =
/// "tier"` pairs), else by the client's address (`lists`), else `default`.
#[derive(Debug, Clone)]
pub struct Plans {
    pub key: KeyPart,
    pub tiers: HashMap<Vec<u8>, String>,
    /// In the order written: the first list that holds the client's address gives its tier.
    pub lists: Vec<TierList>,
    pub default: Option<String>,
    /// A Redis hash of `identity → tier` consulted first, and how long its answers are cached.
    pub redis_hash: Option<(String, Duration)>,
}

/// `[plans] lists` entry: clients whose address is in `ips` (the `[ip_lists]` list `list`)
/// are on `tier`.
#[derive(Debug, Clone)]
pub struct TierList {
    pub list: String,
    pub ips: Arc<IpSet>,
    pub tier: String,
}

impl Plans {
    /// The tier of a client at `client_ip` that no name gave a tier: its address's list's, or
    /// the default. Configs without `lists` pay an empty loop.
    pub fn tier_by_address(&self, client_ip: std::net::IpAddr) -> Option<&str> {
        let listed = self.lists.iter().find(|l| l.ips.contains(client_ip));
        listed
            .map(|l| &l.tier)
            .or(self.default.as_ref())
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_windows_local_share_is_told_by_one_policy_made_once() {
        let rate = |limit| Rate {
            limit,
            per: Duration::from_secs(60),
            burst: limit,
        };
        let window = Window::new(rate(10), "per-key");
        let first = window.share_policy(&rate(5));
        assert_eq!(&*first.item, "\"per-key\";q=5;w=60");
        assert!(Arc::ptr_eq(&first, &window.share_policy(&rate(5))));
        // Another share (never within one config) is told as it is.
        assert_eq!(&*window.share_policy(&rate(3)).item, "\"per-key\";q=3;w=60");
    }
}
