//! A limit as configured and validated: its key, algorithm, windows, tiers and actions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::key::{KeyPart, Missing};
use super::{Algorithm, Policy, Rate};
use crate::ip_set::IpSet;

/// One window of a limit, with the policy it is told as (`per-key`, or `per-key-1d` when the
/// limit has several windows).
#[derive(Debug, Clone)]
pub struct Window {
    pub rate: Rate,
    pub policy: Arc<Policy>,
}

impl Window {
    pub fn new(rate: Rate, name: &str) -> Window {
        Window {
            rate,
            policy: Policy::of(name, &rate),
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
}

impl LimitRule {
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

/// Which tier an identity is on: `identity = "tier"` pairs from the plans file.
#[derive(Debug, Clone)]
pub struct Plans {
    pub key: KeyPart,
    pub tiers: HashMap<Vec<u8>, String>,
    pub default: Option<String>,
    /// A Redis hash of `identity → tier` consulted first, and how long its answers are cached.
    pub redis_hash: Option<(String, Duration)>,
}
