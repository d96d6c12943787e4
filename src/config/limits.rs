//! Validation of `[[limits]]`, `[plans]`, `[response]`, `[store]` and the limit keys of routes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::network::IpLists;
use super::problems::{Problems, echo};
use super::raw::{RawLimit, RawPlans, RawRate, RawResponse, RawRoute, RawStore};
use super::{RedisConfig, ResponseStyle, StoreConfig, parse_duration};
use crate::limit::key::{KeyPart, Missing};
use crate::limit::rules::{LimitRule, OnError, Plans, Tier, Window};
use crate::limit::sliding_log::MAX_LOG_LIMIT;
use crate::limit::{Algorithm, Rate};
use crate::store::redis::{EXACT_LIMIT, describe_url_error};
use crate::store::script::MAX_WINDOWS;

/// `[store] timeout`: how long Redis may keep a call waiting once it could have started on it.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// `[store] connect_timeout`: opening a connection, and a cluster's first read of its slots.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const LONGEST_STORE_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) fn store(
    raw: Option<&RawStore>,
    base_dir: &Path,
    problems: &mut Problems,
) -> StoreConfig {
    let Some(raw) = raw else {
        return StoreConfig::default();
    };
    let redis = match raw.backend.as_deref() {
        None | Some("memory") => {
            refuse_redis_keys(raw, problems);
            None
        }
        Some("redis") => redis_config(raw, false, base_dir, problems),
        Some("redis-cluster") => redis_config(raw, true, base_dir, problems),
        Some(other) => {
            problems.push(
                "store.backend",
                format!(
                    "expected \"memory\", \"redis\" or \"redis-cluster\", got {}",
                    echo(other)
                ),
            );
            None
        }
    };
    let on_error = raw
        .on_error
        .as_deref()
        .map(|text| on_error(text, "store.on_error", problems));
    StoreConfig {
        hash_secret: raw.hash_secret.clone().filter(|s| !s.is_empty()),
        max_entries: problems.number(
            "store.max_entries".into(),
            raw.max_entries,
            (1024, 1_000_000_000),
            4_000_000,
        ) as usize,
        // Each instance enforcing the limit alone (divided by `fallback_instances`, 1 unless
        // set) never refuses a client below its limit, and bounds what an outage lets
        // through, which `allow` does not.
        on_error: on_error.unwrap_or(OnError::Local),
        ready_requires_redis: raw.ready_requires_redis.unwrap_or(false),
        fallback_instances: problems.number(
            "store.fallback_instances".into(),
            raw.fallback_instances,
            (1, 100_000),
            1,
        ) as u64,
        redis,
    }
}

/// With the memory store, Redis settings would be silently ignored: a fleet that meant to share
/// limits would each count alone. Refuse them.
fn refuse_redis_keys(raw: &RawStore, problems: &mut Problems) {
    let redis_keys = [
        ("url", raw.url.is_some()),
        ("urls", raw.urls.is_some()),
        ("timeout", raw.timeout.is_some()),
        ("connect_timeout", raw.connect_timeout.is_some()),
        ("ready_requires_redis", raw.ready_requires_redis.is_some()),
        ("key_prefix", raw.key_prefix.is_some()),
        ("fallback_instances", raw.fallback_instances.is_some()),
        ("ca_file", raw.ca_file.is_some()),
    ];
    for (key, present) in redis_keys {
        if present {
            problems.push(
                format!("store.{key}"),
                "only applies to backend = \"redis\" or \"redis-cluster\"; this store is \"memory\"",
            );
        }
    }
}

fn redis_config(
    raw: &RawStore,
    cluster: bool,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<RedisConfig> {
    let urls = match (cluster, &raw.url, &raw.urls) {
        (false, Some(url), None) => vec![url.clone()],
        (true, None, Some(urls)) if !urls.is_empty() => urls.clone(),
        (false, _, _) => {
            problems.push(
                "store.url",
                "backend \"redis\" needs url = \"redis://host:port/db\" (and no urls)",
            );
            return None;
        }
        (true, _, _) => {
            problems.push(
                "store.urls",
                "backend \"redis-cluster\" needs urls = [\"redis://host:port\", ...] with at least one seed node (and no url)",
            );
            return None;
        }
    };
    let mut valid = true;
    for (i, url) in urls.iter().enumerate() {
        let path = if cluster {
            format!("store.urls[{i}]")
        } else {
            "store.url".to_string()
        };
        if let Err(message) = check_redis_url(url) {
            problems.push(path, message);
            valid = false;
        }
    }
    let timeout = problems.duration(
        "store.timeout".into(),
        raw.timeout.as_deref(),
        DEFAULT_TIMEOUT,
    );
    let connect_timeout = problems.duration(
        "store.connect_timeout".into(),
        raw.connect_timeout.as_deref(),
        DEFAULT_CONNECT_TIMEOUT,
    );
    for (key, value) in [("timeout", timeout), ("connect_timeout", connect_timeout)] {
        if value > LONGEST_STORE_TIMEOUT {
            problems.push(
                format!("store.{key}"),
                format!(
                    "expected at most \"1m\" (requests wait this long for Redis), got {value:?}"
                ),
            );
        }
    }
    let key_prefix = raw.key_prefix.clone().unwrap_or_else(|| "rl:".to_string());
    if key_prefix.contains(['{', '}']) {
        problems.push(
            "store.key_prefix",
            "must not contain '{' or '}': the identity is the key's cluster hash tag",
        );
    }
    let ca_file = raw.ca_file.as_ref().and_then(|file| {
        let path = base_dir.join(file);
        problems.watch(&path);
        if !urls.iter().all(|u| u.starts_with("rediss://")) {
            problems.push("store.ca_file", "only applies to rediss:// URLs");
        }
        match std::fs::read(&path) {
            Ok(pem) if pem.windows(27).any(|w| w == b"-----BEGIN CERTIFICATE-----") => Some(path),
            Ok(_) => {
                problems.push(
                    "store.ca_file",
                    format!("{}: no PEM certificate in it", path.display()),
                );
                None
            }
            Err(e) => {
                problems.push(
                    "store.ca_file",
                    format!("cannot read {}: {e}", path.display()),
                );
                None
            }
        }
    });
    valid.then_some(RedisConfig {
        cluster,
        urls,
        timeout,
        connect_timeout,
        key_prefix,
        ca_file,
    })
}

fn check_redis_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err("expected a redis:// or rediss:// URL".to_string());
    }
    redis::Client::open(url)
        .map(|_| ())
        .map_err(|e| describe_url_error(&e))
}

/// Redis runs the limits in Lua, whose numbers are doubles: refuse windows whose arithmetic
/// would leave the exact range, or whose token interval is below Redis' microsecond clock.
pub(super) fn check_redis_arithmetic(limits: &[LimitRule], problems: &mut Problems) {
    for (i, rule) in limits.iter().enumerate() {
        for window in rule.all_windows() {
            let rate = &window.rate;
            let per_us = rate.per_ns() / 1000;
            let product = u128::from(rate.limit) * u128::from(per_us);
            if rule.algorithm == Algorithm::SlidingWindow && product >= u128::from(EXACT_LIMIT) {
                problems.push(
                    format!("limits[{i}].rates"),
                    format!("{} per {:?} is too large for exact sliding_window arithmetic in Redis (limit × window in µs must stay below 2^53); use a shorter window or token_bucket", rate.limit, rate.per),
                );
            }
            let counter_bits = match rule.algorithm {
                Algorithm::SlidingWindow => 23,
                Algorithm::FixedWindow => 33,
                _ => 64,
            };
            if rate.limit >= 1 << counter_bits.min(63) {
                problems.push(
                    format!("limits[{i}].rates"),
                    format!("{} per {:?} is above what the Redis store counts for {} (below 2^{counter_bits})", rate.limit, rate.per, rule.algorithm.name()),
                );
            }
            if rule.algorithm.is_bucket() && rate.emission_interval_ns() < 1000 {
                problems.push(
                    format!("limits[{i}].rates"),
                    format!("{} per {:?} refills faster than one token per microsecond, the resolution of the Redis store", rate.limit, rate.per),
                );
            }
        }
    }
}

fn on_error(text: &str, path: &str, problems: &mut Problems) -> OnError {
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

pub(super) fn response(raw: Option<&RawResponse>, problems: &mut Problems) -> ResponseStyle {
    let mut style = ResponseStyle::default();
    let Some(raw) = raw else { return style };
    if let Some(families) = &raw.headers {
        style.x_ratelimit = false;
        style.ietf = false;
        for (i, family) in families.iter().enumerate() {
            match family.as_str() {
                "x-ratelimit" => style.x_ratelimit = true,
                "ietf" => style.ietf = true,
                other => problems.push(
                    format!("response.headers[{i}]"),
                    format!("expected \"x-ratelimit\" or \"ietf\", got {}", echo(other)),
                ),
            }
        }
    }
    if let Some(problem_type) = &raw.problem_type {
        if problem_type.parse::<http::Uri>().is_err() || problem_type.is_empty() {
            problems.push(
                "response.problem_type",
                format!("expected a URI, got {}", echo(problem_type)),
            );
        }
        style.problem_type = Arc::from(problem_type.as_str());
    }
    style
}

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
    let algorithm = match raw.algorithm.as_deref() {
        None | Some("token_bucket") => Algorithm::TokenBucket,
        Some("gcra") => Algorithm::Gcra,
        Some("sliding_window") => Algorithm::SlidingWindow,
        Some("fixed_window") => Algorithm::FixedWindow,
        Some("sliding_log") => Algorithm::SlidingLog,
        Some(other) => {
            problems.push(format!("{path}.algorithm"), format!("expected token_bucket, gcra, sliding_window, fixed_window or sliding_log, got {}", echo(other)));
            Algorithm::TokenBucket
        }
    };
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
    let key: Vec<KeyPart> = key.collect();
    let missing = match raw.missing.as_deref() {
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
    };
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
    let exempt_lists: Vec<_> = exempt_lists.collect();
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
    }
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

fn windows(
    limit: &str,
    rates: &[RawRate],
    algorithm: Algorithm,
    path: &str,
    problems: &mut Problems,
) -> Vec<Window> {
    if rates.is_empty() {
        problems.push(
            path,
            "expected at least one rate such as { limit = 100, per = \"1m\" }",
        );
    }
    let rates: Vec<Rate> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| rate(r, algorithm, &format!("{path}[{i}]"), problems))
        .collect();
    rates
        .iter()
        .map(|rate| {
            let policy = if rates.len() == 1 {
                limit.to_string()
            } else {
                format!("{limit}-{}", format_per(rate.per))
            };
            Window::new(*rate, &policy)
        })
        .collect()
}

fn rate(raw: &RawRate, algorithm: Algorithm, path: &str, problems: &mut Problems) -> Rate {
    let max_limit = if algorithm == Algorithm::SlidingLog {
        MAX_LOG_LIMIT as i64
    } else {
        i64::from(u32::MAX)
    };
    let limit = problems.number(format!("{path}.limit"), Some(raw.limit), (1, max_limit), 1) as u64;
    let per = match parse_duration(&raw.per) {
        Ok(per) if !per.is_zero() => per,
        Ok(_) => {
            problems.push(
                format!("{path}.per"),
                "expected a duration greater than zero",
            );
            Duration::from_secs(1)
        }
        Err(message) => {
            problems.push(format!("{path}.per"), message);
            Duration::from_secs(1)
        }
    };
    if raw.burst.is_some() && !algorithm.is_bucket() {
        problems.push(
            format!("{path}.burst"),
            format!(
                "burst applies to token_bucket and gcra, not {}",
                algorithm.name()
            ),
        );
    }
    let burst = problems.number(
        format!("{path}.burst"),
        raw.burst,
        (1, i64::from(u32::MAX)),
        limit as i64,
    ) as u64;
    Rate { limit, per, burst }
}

fn tiers(
    limit: &str,
    raw: &toml::Table,
    algorithm: Algorithm,
    path: &str,
    problems: &mut Problems,
) -> HashMap<String, Tier> {
    raw.iter()
        .map(|(name, value)| {
            let tier_path = format!("{path}.{name}");
            let tier = match value {
                toml::Value::String(s) if s == "unlimited" => Tier::Unlimited,
                toml::Value::Array(_) => match value.clone().try_into::<Vec<RawRate>>() {
                    Ok(rates) => {
                        Tier::Windows(windows(limit, &rates, algorithm, &tier_path, problems))
                    }
                    Err(error) => {
                        problems.push(
                            &tier_path,
                            format!(
                                "expected an array of {{ limit, per, burst }}: {}",
                                error.message()
                            ),
                        );
                        Tier::Unlimited
                    }
                },
                _ => {
                    problems.push(
                        &tier_path,
                        "expected \"unlimited\" or an array of { limit, per, burst }",
                    );
                    Tier::Unlimited
                }
            };
            (name.clone(), tier)
        })
        .collect()
}

pub(super) fn plans(
    raw: Option<&RawPlans>,
    limits: &[LimitRule],
    store: &StoreConfig,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<Plans> {
    let raw = raw?;
    let key = KeyPart::parse(&raw.key)
        .map_err(|m| problems.push("plans.key", m))
        .ok()?;
    let redis_hash = raw.redis_hash.as_ref().and_then(|hash| {
        if store.redis.is_none() {
            problems.push(
                "plans.redis_hash",
                "needs store.backend = \"redis\" or \"redis-cluster\"",
            );
            return None;
        }
        let ttl = problems.duration(
            "plans.redis_ttl".into(),
            raw.redis_ttl.as_deref(),
            Duration::from_secs(10),
        );
        Some((hash.clone(), ttl))
    });
    if raw.redis_ttl.is_some() && raw.redis_hash.is_none() {
        problems.push("plans.redis_ttl", "only applies with plans.redis_hash");
    }
    let entries = match &raw.file {
        Some(file) => plans_file(file, base_dir, problems)?,
        None if raw.redis_hash.is_some() => HashMap::new(),
        None => {
            problems.push(
                "plans",
                "expected file = \"plans.toml\", redis_hash = \"name\", or both",
            );
            return None;
        }
    };
    let known: std::collections::BTreeSet<&String> =
        limits.iter().flat_map(|l| l.tiers.keys()).collect();
    // The default tier may be one no limit defines (those limits use their base rates), but
    // every tier the file names must exist, or a typo would silently grant the base rates.
    let unknown_tier = |tier: &String| !known.contains(tier) && raw.default.as_ref() != Some(tier);
    if let Some(tier) = entries.values().find(|t| unknown_tier(t)) {
        let file = raw.file.as_deref().unwrap_or_default();
        problems.push("plans.file", format!("{file}: tier {tier:?} is not defined in the tiers of any limit; known tiers: {known:?}"));
    }
    let tiers = entries
        .into_iter()
        .map(|(identity, tier)| (identity.into_bytes(), tier))
        .collect();
    Some(Plans {
        key,
        tiers,
        default: raw.default.clone(),
        redis_hash,
    })
}

fn plans_file(
    file: &str,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<HashMap<String, String>> {
    let full_path = base_dir.join(file);
    problems.watch(&full_path);
    let text = std::fs::read_to_string(&full_path)
        .map_err(|e| {
            problems.push(
                "plans.file",
                format!("cannot read {}: {e}", full_path.display()),
            )
        })
        .ok()?;
    toml::from_str(&text)
        .map_err(|e| {
            problems.push(
                "plans.file",
                format!(
                    "{file}: expected `identity = \"tier\"` lines: {}",
                    e.message()
                ),
            )
        })
        .ok()
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
        if let Some(window) = rule
            .all_windows()
            .find(|w| cost > capacity(rule.algorithm, &w.rate))
        {
            problems.push(
                format!("{path}.cost"),
                format!(
                    "cost {cost} exceeds window {:?} of limit {:?}; such requests could never pass",
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

/// `60s` → `1m`: the largest unit that divides the duration.
fn format_per(per: Duration) -> String {
    let ms = per.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}
