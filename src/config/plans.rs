//! Validation of `[plans]`: which tier each identity is on, from a file, a Redis hash, or both.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use super::StoreConfig;
use super::network::IpLists;
use super::problems::Problems;
use super::raw::{RawPlans, RawTierList};
use crate::limit::key::KeyPart;
use crate::limit::rules::{LimitRule, Plans, TierList};

pub(super) fn plans(
    raw: Option<&RawPlans>,
    limits: &[LimitRule],
    store: &StoreConfig,
    ip_lists: &IpLists,
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
        None if raw.redis_hash.is_some() || raw.lists.is_some() => HashMap::new(),
        None => {
            problems.push(
                "plans",
                "expected file = \"plans.toml\", redis_hash = \"name\", lists = [{ list, tier }], or several",
            );
            return None;
        }
    };
    let known: BTreeSet<&String> = limits.iter().flat_map(|l| l.tiers.keys()).collect();
    // The default tier may be one no limit defines (those limits use their base rates), but
    // every tier the file or a list names must exist, or a typo would silently grant the base
    // rates.
    let unknown_tier = |tier: &String| !known.contains(tier) && raw.default.as_ref() != Some(tier);
    if let Some(tier) = entries.values().find(|t| unknown_tier(t)) {
        let file = raw.file.as_deref().unwrap_or_default();
        problems.push("plans.file", format!("{file}: tier {tier:?} is not defined in the tiers of any limit; known tiers: {known:?}"));
    }
    let raw_lists = raw.lists.as_deref().unwrap_or_default();
    let lists = raw_lists.iter().enumerate().filter_map(|(i, entry)| {
        let path = format!("plans.lists[{i}]");
        if unknown_tier(&entry.tier) {
            problems.push(
                format!("{path}.tier"),
                format!(
                    "tier {:?} is not defined in the tiers of any limit; known tiers: {known:?}",
                    entry.tier
                ),
            );
        }
        tier_list(entry, ip_lists, &path, problems)
    });
    let lists = lists.collect();
    let tiers = entries
        .into_iter()
        .map(|(identity, tier)| (identity.into_bytes(), tier))
        .collect();
    Some(Plans {
        key,
        tiers,
        lists,
        default: raw.default.clone(),
        redis_hash,
    })
}

/// One `lists` entry, its list resolved to its set of addresses.
fn tier_list(
    raw: &RawTierList,
    ip_lists: &IpLists,
    path: &str,
    problems: &mut Problems,
) -> Option<TierList> {
    let Some(ips) = ip_lists.get(&raw.list) else {
        let known: Vec<&String> = ip_lists.keys().collect();
        problems.push(
            format!("{path}.list"),
            format!(
                "unknown ip list {:?}; expected one of {known:?} from [ip_lists]",
                raw.list
            ),
        );
        return None;
    };
    Some(TierList {
        list: raw.list.clone(),
        ips: ips.clone(),
        tier: raw.tier.clone(),
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
