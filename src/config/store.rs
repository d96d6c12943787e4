//! Validation of `[store]`: the memory store's bound, or a Redis backend's URLs, deadlines, key
//! prefix and CA file; and what of the limits the Redis store cannot count exactly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::limits::on_error;
use super::problems::{Problems, echo};
use super::raw::RawStore;
use super::{RedisConfig, StoreConfig};
use crate::limit::Algorithm;
use crate::limit::rules::{LimitRule, OnError};
use crate::store::redis::{EXACT_LIMIT, describe_url_error};

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

/// `[store]` of a Redis backend; None when its URLs cannot be used (every other problem is
/// reported too).
fn redis_config(
    raw: &RawStore,
    cluster: bool,
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<RedisConfig> {
    let urls = redis_urls(raw, cluster, problems)?;
    let valid = check_redis_urls(&urls, cluster, problems);
    let (timeout, connect_timeout) = redis_timeouts(raw, problems);
    let key_prefix = key_prefix(raw, problems);
    let ca_file = ca_file(raw, &urls, base_dir, problems);
    valid.then_some(RedisConfig {
        cluster,
        urls,
        timeout,
        connect_timeout,
        key_prefix,
        ca_file,
    })
}

/// `url` for a single node, `urls` (the seed nodes) for a cluster, never both.
fn redis_urls(raw: &RawStore, cluster: bool, problems: &mut Problems) -> Option<Vec<String>> {
    match (cluster, &raw.url, &raw.urls) {
        (false, Some(url), None) => Some(vec![url.clone()]),
        (true, None, Some(urls)) if !urls.is_empty() => Some(urls.clone()),
        (false, _, _) => {
            problems.push(
                "store.url",
                "backend \"redis\" needs url = \"redis://host:port/db\" (and no urls)",
            );
            None
        }
        (true, _, _) => {
            problems.push(
                "store.urls",
                "backend \"redis-cluster\" needs urls = [\"redis://host:port\", ...] with at least one seed node (and no url)",
            );
            None
        }
    }
}

/// Whether every URL can be used; reports each one that cannot.
fn check_redis_urls(urls: &[String], cluster: bool, problems: &mut Problems) -> bool {
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
    valid
}

fn check_redis_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err("expected a redis:// or rediss:// URL".to_string());
    }
    redis::Client::open(url)
        .map(|_| ())
        .map_err(|e| describe_url_error(&e))
}

/// `timeout` and `connect_timeout`, each at most a minute: requests wait this long for Redis.
fn redis_timeouts(raw: &RawStore, problems: &mut Problems) -> (Duration, Duration) {
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
    (timeout, connect_timeout)
}

fn key_prefix(raw: &RawStore, problems: &mut Problems) -> String {
    let key_prefix = raw.key_prefix.clone().unwrap_or_else(|| "rl:".to_string());
    if key_prefix.contains(['{', '}']) {
        problems.push(
            "store.key_prefix",
            "must not contain '{' or '}': the identity is the key's cluster hash tag",
        );
    }
    key_prefix
}

/// `ca_file`, read now so a file without a certificate is refused with the config.
fn ca_file(
    raw: &RawStore,
    urls: &[String],
    base_dir: &Path,
    problems: &mut Problems,
) -> Option<PathBuf> {
    let path = base_dir.join(raw.ca_file.as_ref()?);
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
}

/// Redis runs the limits in Lua, whose numbers are doubles: refuse windows whose arithmetic
/// would leave the exact range, or whose token interval is below Redis' microsecond clock.
/// A charge on a `sliding_log` limit settles only in memory: the Redis settle of a log was
/// seen to keep one entry fewer than the Rust rules in some sequences of reservations and
/// refunds, which would under-count; refused with a Redis store until that is found.
pub(super) fn check_redis_charges(limits: &[LimitRule], problems: &mut Problems) {
    for (i, rule) in limits.iter().enumerate() {
        if rule.charge.is_some() && rule.algorithm == Algorithm::SlidingLog {
            problems.push(
                format!("limits[{i}].charge"),
                "a sliding_log limit with a charge needs [store] backend = \"memory\" in this \
                 version; with Redis use token_bucket, gcra, fixed_window or sliding_window",
            );
        }
    }
}

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
