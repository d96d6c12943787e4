//! Warnings about addresses that two first-match-wins entries both claim with different
//! outcomes: `[edge] overrides` and `[plans] lists`. The first entry holding an address
//! decides, so a later one's outcome never applies there; that is legal (a narrow exception
//! written first is the usual way to carve one out), but it may be a mistake, so `check` and
//! the gateway at start say where.

use std::sync::Arc;

use super::problems::Problems;
use super::rates::format_per;
use crate::admission::edge::{EdgeOverride, EdgePolicy};
use crate::limit::rules::Plans;
use crate::request::ip_set::IpSet;

/// One entry of a first-match-wins list of lists: its list and what it does, as told.
struct Claim<'a> {
    list: &'a str,
    ips: &'a Arc<IpSet>,
    outcome: String,
}

/// Warns about every pair of `[edge] overrides`, and of `[plans] lists`, whose lists share
/// addresses and whose outcomes differ.
pub(super) fn warn_about_overlaps(
    edge: Option<&EdgePolicy>,
    plans: Option<&Plans>,
    problems: &mut Problems,
) {
    if let Some(edge) = edge {
        let claims = edge.overrides.iter().map(|over| match over {
            EdgeOverride::Exempt { list, ips } => Claim {
                list,
                ips,
                outcome: "exempt".into(),
            },
            EdgeOverride::Rate { list, ips, rate } => Claim {
                list,
                ips,
                outcome: format!(
                    "rate {} per {} (burst {})",
                    rate.limit,
                    format_per(rate.per),
                    rate.burst
                ),
            },
        });
        warn_in_order(&claims.collect::<Vec<_>>(), "edge.overrides", problems);
    }
    if let Some(plans) = plans {
        let claims = plans.lists.iter().map(|entry| Claim {
            list: &entry.list,
            ips: &entry.ips,
            outcome: format!("tier {:?}", entry.tier),
        });
        warn_in_order(&claims.collect::<Vec<_>>(), "plans.lists", problems);
    }
}

/// `claims` are checked in order, first match wins: each later claim that overlaps an
/// earlier one with another outcome is told at its own key path.
fn warn_in_order(claims: &[Claim], path: &str, problems: &mut Problems) {
    for (later, claim) in claims.iter().enumerate() {
        for (earlier, first) in claims[..later].iter().enumerate() {
            if first.outcome == claim.outcome {
                continue;
            }
            let Some(example) = first.ips.first_overlap(claim.ips) else {
                continue;
            };
            problems.warn(
                format!("{path}[{later}]"),
                Some(format!(
                    "list {:?} overlaps list {:?} of {path}[{earlier}] (e.g. {example}); \
                     the first match wins, so there it gets {}, not {}",
                    claim.list, first.list, first.outcome, claim.outcome
                )),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim<'a>(list: &'a str, ips: &'a Arc<IpSet>, outcome: &str) -> Claim<'a> {
        Claim {
            list,
            ips,
            outcome: outcome.into(),
        }
    }

    fn set(blocks: &[&str]) -> Arc<IpSet> {
        Arc::new(IpSet::new(blocks.iter().map(|b| b.parse().unwrap())))
    }

    fn warnings(claims: &[Claim]) -> Vec<String> {
        let mut problems = Problems::default();
        warn_in_order(claims, "plans.lists", &mut problems);
        problems.into_parts().2
    }

    #[test]
    fn overlaps_with_other_outcomes_are_told_with_an_example() {
        let office = set(&["203.0.113.0/24"]);
        let vpn = set(&["203.0.113.128/25", "10.0.0.0/8"]);
        let elsewhere = set(&["192.0.2.0/24"]);
        let told = warnings(&[
            claim("office", &office, "tier \"nat\""),
            claim("elsewhere", &elsewhere, "tier \"x\""),
            claim("vpn", &vpn, "tier \"vpn\""),
        ]);
        assert_eq!(
            told,
            [
                "plans.lists[2]: list \"vpn\" overlaps list \"office\" of plans.lists[0] (e.g. \
                 203.0.113.128/25); the first match wins, so there it gets tier \"nat\", not \
                 tier \"vpn\""
            ]
        );
    }

    #[test]
    fn overlaps_with_the_same_outcome_are_not_told() {
        let a = set(&["203.0.113.0/24"]);
        let b = set(&["203.0.113.0/25"]);
        assert!(warnings(&[claim("a", &a, "exempt"), claim("b", &b, "exempt")]).is_empty());
    }
}
