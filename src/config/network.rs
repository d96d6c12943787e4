//! Validation of `[client_ip]`, `[ip_lists]` and `[edge]`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use ipnet::IpNet;

use super::duration::parse_rate;
use super::problems::{Problems, echo};
use super::raw::{RawClientIp, RawEdge, RawEdgeOverride};
use crate::admission::edge::{EdgeOverride, EdgePolicy};
use crate::limit::Rate;
use crate::request::client_ip::{ClientIpPolicy, ForwardHeader};
use crate::request::ip_set::IpSet;

/// Named IP lists, each compiled once into a set.
pub(crate) type IpLists = BTreeMap<String, Arc<IpSet>>;

/// At most this many bad lines are reported per list file.
const MAX_FILE_PROBLEMS: usize = 5;

pub(super) fn client_ip(raw: Option<&RawClientIp>, problems: &mut Problems) -> ClientIpPolicy {
    let Some(raw) = raw else {
        return ClientIpPolicy::default();
    };
    let trusted = raw.trusted_proxies.as_deref().unwrap_or_default();
    let blocks = trusted
        .iter()
        .enumerate()
        .filter_map(|(i, text)| match parse_cidr(text) {
            Ok(block) => Some(block),
            Err(message) => {
                problems.push(format!("client_ip.trusted_proxies[{i}]"), message);
                None
            }
        });
    let trusted_proxies = IpSet::new(blocks.collect::<Vec<_>>());
    let header = match raw
        .header
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("x-forwarded-for") => ForwardHeader::XForwardedFor,
        Some("forwarded") => ForwardHeader::Forwarded,
        Some("x-real-ip") => ForwardHeader::XRealIp,
        Some(other) => {
            problems.push(
                "client_ip.header",
                format!(
                    "expected \"x-forwarded-for\", \"forwarded\" or \"x-real-ip\", got {}",
                    echo(other)
                ),
            );
            ForwardHeader::XForwardedFor
        }
    };
    let ipv6_prefix = problems.number(
        "client_ip.ipv6_prefix".into(),
        raw.ipv6_prefix,
        (1, 128),
        64,
    ) as u8;
    ClientIpPolicy {
        trusted_proxies,
        header,
        ipv6_prefix,
    }
}

/// `198.51.100.0/24`, `2001:db8::/32`, or a bare address (one host).
pub(crate) fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .map(|net| net.trunc())
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!(
                "expected a CIDR such as \"198.51.100.0/24\" or an address, got {}",
                echo(text)
            )
        })
}

pub(super) fn ip_lists(
    raw: Option<&toml::Table>,
    base_dir: &Path,
    problems: &mut Problems,
) -> IpLists {
    let Some(raw) = raw else {
        return IpLists::new();
    };
    raw.iter()
        .map(|(name, value)| {
            let path = format!("ip_lists.{name}");
            let blocks = match value {
                toml::Value::Array(items) => inline_list(items, &path, problems),
                toml::Value::Table(table) => file_list(table, base_dir, &path, problems),
                _ => {
                    problems.push(
                        &path,
                        "expected an array of CIDRs or { file = \"list.txt\" }",
                    );
                    Vec::new()
                }
            };
            (name.clone(), Arc::new(IpSet::new(blocks)))
        })
        .collect()
}

fn inline_list(items: &[toml::Value], path: &str, problems: &mut Problems) -> Vec<IpNet> {
    let parsed = items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_str().map(parse_cidr) {
            Some(Ok(block)) => Some(block),
            Some(Err(message)) => {
                problems.push(format!("{path}[{i}]"), message);
                None
            }
            None => {
                problems.push(format!("{path}[{i}]"), "expected a CIDR string");
                None
            }
        });
    parsed.flatten().collect()
}

fn file_list(
    table: &toml::Table,
    base_dir: &Path,
    path: &str,
    problems: &mut Problems,
) -> Vec<IpNet> {
    let file = match (table.get("file").and_then(toml::Value::as_str), table.len()) {
        (Some(file), 1) => file,
        _ => {
            problems.push(path, "expected { file = \"list.txt\" } and no other keys");
            return Vec::new();
        }
    };
    let full_path = base_dir.join(file);
    problems.watch(&full_path);
    let text = match std::fs::read_to_string(&full_path) {
        Ok(text) => text,
        Err(error) => {
            problems.push(
                format!("{path}.file"),
                format!("cannot read {}: {error}", full_path.display()),
            );
            return Vec::new();
        }
    };
    let mut bad_lines = 0;
    let mut blocks = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let entry = line.split('#').next().unwrap_or_default().trim();
        if entry.is_empty() {
            continue;
        }
        match parse_cidr(entry) {
            Ok(block) => blocks.push(block),
            Err(message) if bad_lines < MAX_FILE_PROBLEMS => {
                bad_lines += 1;
                problems.push(
                    format!("{path}.file"),
                    format!("{file} line {}: {message}", number + 1),
                );
            }
            Err(_) => bad_lines += 1,
        }
    }
    if bad_lines > MAX_FILE_PROBLEMS {
        problems.push(
            format!("{path}.file"),
            format!("{file}: {} more bad lines", bad_lines - MAX_FILE_PROBLEMS),
        );
    }
    blocks
}

pub(super) fn edge(
    raw: Option<&RawEdge>,
    lists: &IpLists,
    problems: &mut Problems,
) -> Option<EdgePolicy> {
    let raw = raw?;
    let rate = rate_with_burst("edge", &raw.rate, raw.burst, problems);
    let deny = raw.deny.as_deref().unwrap_or_default();
    let deny = deny
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            Some((
                name.clone(),
                list(lists, name, &format!("edge.deny[{i}]"), problems)?,
            ))
        })
        .collect();
    let overrides = raw.overrides.as_deref().unwrap_or_default();
    let overrides = overrides
        .iter()
        .enumerate()
        .filter_map(|(i, o)| edge_override(o, lists, &format!("edge.overrides[{i}]"), problems))
        .collect();
    Some(EdgePolicy {
        rate,
        max_tracked: problems.number(
            "edge.max_tracked".into(),
            raw.max_tracked,
            (1, 100_000_000),
            1_000_000,
        ) as usize,
        deny,
        overrides,
    })
}

fn edge_override(
    raw: &RawEdgeOverride,
    lists: &IpLists,
    path: &str,
    problems: &mut Problems,
) -> Option<EdgeOverride> {
    let ips = list(lists, &raw.list, &format!("{path}.list"), problems)?;
    let list = raw.list.clone();
    match (raw.exempt, &raw.rate) {
        (Some(true), None) if raw.burst.is_none() => Some(EdgeOverride::Exempt { list, ips }),
        (None | Some(false), Some(rate)) => {
            let rate = rate_with_burst(path, rate, raw.burst, problems);
            Some(EdgeOverride::Rate { list, ips, rate })
        }
        _ => {
            problems.push(
                path,
                "expected either exempt = true, or rate (and optionally burst)",
            );
            None
        }
    }
}

/// A rate string plus an optional burst (default: the rate's count).
pub(super) fn rate_with_burst(
    path: &str,
    rate: &str,
    burst: Option<i64>,
    problems: &mut Problems,
) -> Rate {
    let (limit, per) = parse_rate(rate).unwrap_or_else(|message| {
        problems.push(format!("{path}.rate"), message);
        (1, std::time::Duration::from_secs(1))
    });
    let burst = problems.number(
        format!("{path}.burst"),
        burst,
        (1, 1_000_000_000),
        limit as i64,
    ) as u64;
    Rate { limit, per, burst }
}

fn list(lists: &IpLists, name: &str, path: &str, problems: &mut Problems) -> Option<Arc<IpSet>> {
    let found = lists.get(name).cloned();
    if found.is_none() {
        let known: Vec<&String> = lists.keys().collect();
        problems.push(
            path,
            format!("unknown ip list {name:?}; expected one of {known:?} from [ip_lists]"),
        );
    }
    found
}
