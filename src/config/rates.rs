//! Validation of a limit's `rates` and `tiers`: each rate checked against the limit's
//! algorithm, then made a window with the policy name it is told as.

use std::collections::HashMap;
use std::time::Duration;

use super::parse_duration;
use super::problems::Problems;
use super::raw::RawRate;
use crate::limit::rules::{Tier, Window};
use crate::limit::sliding_log::MAX_LOG_LIMIT;
use crate::limit::{Algorithm, Rate};

pub(super) fn windows(
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

pub(super) fn tiers(
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

/// `60s` → `1m`: the largest unit that divides the duration.
pub(super) fn format_per(per: Duration) -> String {
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
