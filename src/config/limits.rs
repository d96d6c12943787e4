//! Validation of `[[limits]]` and of the limits each route applies.

use std::sync::Arc;
use std::time::Duration;

use super::network::IpLists;
use super::problems::{Problems, echo};
use super::rates::{tiers, windows};
use super::raw::{RawLimit, RawRoute};
use crate::limit::charge::Charge;
use crate::limit::key::{KeyPart, Missing};
use crate::limit::rules::{Consistency, LimitRule, OnError};
use crate::limit::{Algorithm, Rate};
use crate::request::ip_set::IpSet;
use crate::store::script::MAX_WINDOWS;

pub(super) fn limits(
    raw: &[RawLimit],
    lists: &IpLists,
    default_on_error: OnError,
    problems: &mut Problems,
) -> Vec<LimitRule> {
    raw.iter()
        .enumerate()
        .map(|(i, l)| {
            limit(
                l,
                &format!("limits[{i}]"),
                lists,
                default_on_error,
                problems,
            )
        })
        .collect()
}

fn limit(
    raw: &RawLimit,
    path: &str,
    lists: &IpLists,
    default_on_error: OnError,
    problems: &mut Problems,
) -> LimitRule {
    let algorithm = algorithm(raw, path, problems);
    if !is_quotable(&raw.name) {
        problems.push(
            format!("{path}.name"),
            format!(
                "expected printable ASCII without '\"' or '\\' (the name is quoted in the \
                 RateLimit headers), got {}",
                echo(&raw.name)
            ),
        );
    }
    let key = key_parts(raw, path, problems);
    let missing = missing(raw, path, problems);
    let windows = windows(
        &raw.name,
        &raw.rates,
        algorithm,
        &format!("{path}.rates"),
        problems,
    );
    let tiers = raw
        .tiers
        .as_ref()
        .map(|t| tiers(&raw.name, t, algorithm, &format!("{path}.tiers"), problems))
        .unwrap_or_default();
    let exempt_lists = exempt_lists(raw, path, lists, problems);
    LimitRule {
        name: Arc::from(raw.name.as_str()),
        key,
        missing,
        algorithm,
        windows,
        tiers,
        shadow: raw.shadow.unwrap_or(false),
        max_delay: max_delay(raw, algorithm, path, problems),
        exempt_lists,
        on_error: raw.on_error.as_deref().map_or(default_on_error, |t| {
            on_error(t, &format!("{path}.on_error"), problems)
        }),
        consistency: consistency(raw, algorithm, path, problems),
        charge: charge(raw, path, problems),
    }
}

/// `charge`: only on exact limits, as an approximate limit's lease is spent ahead of the
/// store and has no reservation to settle.
fn charge(raw: &RawLimit, path: &str, problems: &mut Problems) -> Option<Charge> {
    let charge_path = format!("{path}.charge");
    let charge = super::charge::charge(raw.charge.as_ref()?, &charge_path, problems)?;
    if raw.consistency.as_deref() == Some("approximate") {
        problems.push(
            charge_path,
            "a limit with a charge must be consistency = \"exact\" (an approximate limit's \
             leases are spent ahead of the store and are not settled)",
        );
    }
    Some(charge)
}

/// The longest `sync_interval`: an instance that has not synced for three of them falls back
/// to `on_error`, and a lease older than a few seconds says little about the fleet.
const LONGEST_SYNC_INTERVAL: Duration = Duration::from_secs(10);

/// `consistency` and `sync_interval`. Approximate limits lease counts, which only adds up for
/// algorithms whose state is a count: a bucket's or GCRA's state is a time that depends on
/// the order of arrivals, and a sliding log needs every request's timestamp.
fn consistency(
    raw: &RawLimit,
    algorithm: Algorithm,
    path: &str,
    problems: &mut Problems,
) -> Consistency {
    let interval_path = format!("{path}.sync_interval");
    match raw.consistency.as_deref() {
        None | Some("exact") => {
            if raw.sync_interval.is_some() {
                problems.push(
                    interval_path,
                    "only used with consistency = \"approximate\"",
                );
            }
            Consistency::Exact
        }
        Some("approximate") => {
            if !matches!(algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindow) {
                problems.push(
                    format!("{path}.consistency"),
                    format!(
                        "\"approximate\" needs an algorithm whose counts add up: fixed_window or sliding_window, not {}",
                        algorithm.name()
                    ),
                );
            }
            let sync_interval = problems.duration(
                interval_path.clone(),
                raw.sync_interval.as_deref(),
                DEFAULT_SYNC_INTERVAL,
            );
            if sync_interval > LONGEST_SYNC_INTERVAL {
                problems.push(
                    interval_path,
                    format!(
                        "expected a duration above 0 and at most \"10s\", got {sync_interval:?}"
                    ),
                );
            }
            Consistency::Approximate { sync_interval }
        }
        Some(other) => {
            problems.push(
                format!("{path}.consistency"),
                format!("expected \"exact\" or \"approximate\", got {}", echo(other)),
            );
            Consistency::Exact
        }
    }
}

/// `sync_interval` when an approximate limit does not say.
pub(super) const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);

fn algorithm(raw: &RawLimit, path: &str, problems: &mut Problems) -> Algorithm {
    match raw.algorithm.as_deref() {
        None | Some("token_bucket") => Algorithm::TokenBucket,
        Some("gcra") => Algorithm::Gcra,
        Some("sliding_window") => Algorithm::SlidingWindow,
        Some("fixed_window") => Algorithm::FixedWindow,
        Some("sliding_log") => Algorithm::SlidingLog,
        Some(other) => {
            problems.push(format!("{path}.algorithm"), format!("expected token_bucket, gcra, sliding_window, fixed_window or sliding_log, got {}", echo(other)));
            Algorithm::TokenBucket
        }
    }
}

/// The parts of `key`, each parsed; at least one.
fn key_parts(raw: &RawLimit, path: &str, problems: &mut Problems) -> Vec<KeyPart> {
    if raw.key.is_empty() {
        problems.push(
            format!("{path}.key"),
            "expected at least one key part, e.g. [\"ip\"]",
        );
    }
    let key = raw.key.iter().enumerate().filter_map(|(i, part)| {
        KeyPart::parse(part)
            .map_err(|message| problems.push(format!("{path}.key[{i}]"), message))
            .ok()
    });
    key.collect()
}

/// What a request without one of the key's parts gets (`missing`).
fn missing(raw: &RawLimit, path: &str, problems: &mut Problems) -> Missing {
    match raw.missing.as_deref() {
        None | Some("ip") => Missing::Ip,
        Some("skip") => Missing::Skip,
        Some("deny") => Missing::Deny,
        Some(other) => {
            problems.push(
                format!("{path}.missing"),
                format!("expected \"ip\", \"skip\" or \"deny\", got {}", echo(other)),
            );
            Missing::Ip
        }
    }
}

/// `exempt_lists`, each one of `[ip_lists]`.
fn exempt_lists(
    raw: &RawLimit,
    path: &str,
    lists: &IpLists,
    problems: &mut Problems,
) -> Vec<(String, Arc<IpSet>)> {
    let exempt_lists = raw
        .exempt_lists
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let found = lists.get(name).cloned();
            if found.is_none() {
                problems.push(
                    format!("{path}.exempt_lists[{i}]"),
                    format!("unknown ip list {name:?}; expected one from [ip_lists]"),
                );
            }
            Some((name.clone(), found?))
        });
    exempt_lists.collect()
}

fn max_delay(
    raw: &RawLimit,
    algorithm: Algorithm,
    path: &str,
    problems: &mut Problems,
) -> Duration {
    match raw.action.as_deref() {
        None | Some("reject") => {
            if raw.max_delay.is_some() {
                problems.push(
                    format!("{path}.max_delay"),
                    "only used with action = \"delay\"",
                );
            }
            Duration::ZERO
        }
        Some("delay") => {
            if !algorithm.is_bucket() {
                problems.push(
                    format!("{path}.action"),
                    format!(
                        "\"delay\" needs algorithm token_bucket or gcra, not {}",
                        algorithm.name()
                    ),
                );
            }
            problems.duration(
                format!("{path}.max_delay"),
                raw.max_delay.as_deref(),
                Duration::from_millis(500),
            )
        }
        Some(other) => {
            problems.push(
                format!("{path}.action"),
                format!("expected \"reject\" or \"delay\", got {}", echo(other)),
            );
            Duration::ZERO
        }
    }
}

/// What a Structured Field string (RFC 8941 §3.3.3) holds as it is: the RateLimit and
/// RateLimit-Policy fields quote a limit's name on every limited response, unescaped.
fn is_quotable(name: &str) -> bool {
    name.bytes()
        .all(|b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\')
}

/// The limit keys of one route: names resolved to indices, the cost checked against every
/// window it could meet.
pub(super) fn route_limits(
    raw: &RawRoute,
    path: &str,
    limits: &[LimitRule],
    problems: &mut Problems,
) -> (Vec<usize>, u64, Option<usize>) {
    let cost = problems.number(format!("{path}.cost"), raw.cost, (1, 1_000_000), 1) as u64;
    let max_in_flight = raw.max_in_flight.map(|_| {
        problems.number(
            format!("{path}.max_in_flight"),
            raw.max_in_flight,
            (1, 10_000_000),
            1,
        ) as usize
    });
    let names = raw.limits.as_deref().unwrap_or_default();
    let indices = names.iter().enumerate().filter_map(|(i, name)| {
        let index = limits.iter().position(|l| &*l.name == name);
        if index.is_none() {
            let known: Vec<&str> = limits.iter().map(|l| &*l.name).collect();
            problems.push(
                format!("{path}.limits[{i}]"),
                format!("unknown limit {name:?}; expected one of {known:?}"),
            );
        }
        index
    });
    let indices: Vec<usize> = indices.collect();
    let windows: usize = indices.iter().map(|&i| limits[i].most_windows()).sum();
    if windows > MAX_WINDOWS {
        problems.push(
            format!("{path}.limits"),
            format!(
                "these limits have up to {windows} windows (rates) together; a request is checked against at most {MAX_WINDOWS}"
            ),
        );
    }
    for &index in &indices {
        let rule = &limits[index];
        // A limit's own `charge.reserve` takes the place of the route's cost.
        let reserve = rule.charge.as_ref().and_then(|c| c.reserve);
        let (units, what) = match reserve {
            Some(reserve) => (
                reserve,
                format!("charge.reserve {reserve} of limit {:?}", &*rule.name),
            ),
            None => (cost, format!("cost {cost}")),
        };
        if let Some(window) = rule
            .all_windows()
            .find(|w| units > capacity(rule.algorithm, &w.rate))
        {
            problems.push(
                format!("{path}.cost"),
                format!(
                    "{what} exceeds window {:?} of limit {:?}; such requests could never pass",
                    &*window.policy.name, &*rule.name
                ),
            );
        }
    }
    (indices, cost, max_in_flight)
}

fn capacity(algorithm: Algorithm, rate: &Rate) -> u64 {
    if algorithm.is_bucket() {
        rate.burst
    } else {
        rate.limit
    }
}

/// `on_error` of a limit, or of `[store]` (the limits' default).
pub(super) fn on_error(text: &str, path: &str, problems: &mut Problems) -> OnError {
    match text {
        "allow" => OnError::Allow,
        "deny" => OnError::Deny,
        "local" => OnError::Local,
        other => {
            problems.push(
                path,
                format!(
                    "expected \"allow\", \"deny\" or \"local\", got {}",
                    echo(other)
                ),
            );
            OnError::Allow
        }
    }
}
