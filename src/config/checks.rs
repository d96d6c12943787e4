//! Safety checks: settings that load and serve but that an operator most likely did not mean
//! (an unkeyed identity hash, a trust-everyone proxy list, an admin listener off loopback, a
//! limit nothing uses). They are warnings, not problems: `check` prints them (and fails on
//! them with `--strict`), and serving or reloading logs them. They read the raw config, after
//! `${VAR}` expansion, so each names the key path and the entry it is about.

use std::fmt;
use std::net::SocketAddr;

use ipnet::IpNet;

use super::parse_cidr;
use super::problems::echo;
use super::raw::RawConfig;

/// The example config's `hash_secret`: copied as it is, it keys nothing a reader of the
/// example cannot compute.
const EXAMPLE_HASH_SECRET: &str = "change-me";

/// The widest trusted range that can still be private: 10.0.0.0/8 is the largest private IPv4
/// range and fc00::/7 (unique local addresses) the largest IPv6 one. A trusted range wider
/// than these necessarily holds public addresses, whose clients could then write their own
/// X-Forwarded-For and pick the address they are limited as.
const WIDEST_PRIVATE_V4_PREFIX: u8 = 8;
const WIDEST_PRIVATE_V6_PREFIX: u8 = 7;

/// One setting an operator should look at, at a key path such as `admin.listen`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every safety warning about `raw`, in the order of the file's sections.
pub(super) fn warnings(raw: &RawConfig) -> Vec<Warning> {
    let mut found = Vec::new();
    found.extend(hash_secret(raw));
    found.extend(trusted_proxies(raw));
    found.extend(admin_listen(raw));
    found.extend(unused_limits(raw));
    found
}

fn hash_secret(raw: &RawConfig) -> Option<Warning> {
    let secret = raw.store.as_ref().and_then(|s| s.hash_secret.as_deref());
    let message = match secret {
        None | Some("") => {
            "not set: identities (API keys, client IPs) are hashed unkeyed, so whoever reads /debug/limited, the logs or Redis can test guesses against them; set a long random value, the same on every instance"
        }
        Some(EXAMPLE_HASH_SECRET) => {
            "is the example's \"change-me\": set a long random value of your own, the same on every instance"
        }
        Some(_) => return None,
    };
    Some(Warning {
        path: "store.hash_secret".into(),
        message: message.into(),
    })
}

/// Entries wider than the largest private range (see `WIDEST_PRIVATE_V4_PREFIX`); entries that
/// do not parse are validation's to report.
fn trusted_proxies(raw: &RawConfig) -> Vec<Warning> {
    let entries = raw
        .client_ip
        .as_ref()
        .and_then(|c| c.trusted_proxies.as_deref());
    let entries = entries.unwrap_or_default();
    entries
        .iter()
        .enumerate()
        .filter_map(|(i, text)| {
            let block = parse_cidr(text).ok()?;
            let (widest, family) = match block {
                IpNet::V4(_) => (WIDEST_PRIVATE_V4_PREFIX, "10.0.0.0/8"),
                IpNet::V6(_) => (WIDEST_PRIVATE_V6_PREFIX, "fc00::/7"),
            };
            (block.prefix_len() < widest).then(|| Warning {
                path: format!("client_ip.trusted_proxies[{i}]"),
                message: format!(
                    "{} is wider than {family}, the largest private range: it trusts public addresses, whose clients can then choose the address they are limited as; list only your proxies' and load balancers' ranges",
                    echo(text)
                ),
            })
        })
        .collect()
}

/// An admin listener anyone but this host can reach: it has no authentication, and
/// `/limits/NAME/reset` lets whoever reaches it clear a limit.
fn admin_listen(raw: &RawConfig) -> Option<Warning> {
    let listen = &raw.admin.as_ref()?.listen;
    let addr = listen.parse::<SocketAddr>().ok()?;
    (!addr.ip().is_loopback()).then(|| Warning {
        path: "admin.listen".into(),
        message: format!(
            "{} is not a loopback address: the admin endpoints have no authentication, and whoever reaches /limits/NAME/reset can clear any limit, so keep this port to your operators and probes (firewall it, or do not publish it from a container)",
            echo(listen)
        ),
    })
}

/// `[[limits]]` entries that no route names: they count nothing, which is rarely what an
/// operator who wrote them meant (a typo in a route's `limits`, or a route removed).
fn unused_limits(raw: &RawConfig) -> Vec<Warning> {
    let used = |name: &str| {
        raw.routes
            .iter()
            .filter_map(|route| route.limits.as_deref())
            .any(|limits| limits.iter().any(|l| l == name))
    };
    raw.limits
        .iter()
        .enumerate()
        .filter(|(_, limit)| !used(&limit.name))
        .map(|(i, limit)| Warning {
            path: format!("limits[{i}]"),
            message: format!(
                "limit {} is used by no route: it counts nothing",
                echo(&limit.name)
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[store]
hash_secret = "a-long-random-value"
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
limits = ["per-ip"]
[[limits]]
name = "per-ip"
key = ["ip"]
rates = [{ limit = 10, per = "1s" }]
"#;

    fn warnings_of(text: &str) -> Vec<String> {
        let raw: RawConfig = toml::from_str(text).unwrap();
        warnings(&raw).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_careful_config_has_no_warnings() {
        let text = format!(
            "{BASE}\n[admin]\nlisten = \"127.0.0.1:9090\"\n[client_ip]\ntrusted_proxies = [\"10.0.0.0/8\", \"172.16.0.0/12\", \"fc00::/7\", \"2400:cb00::/32\", \"192.0.2.1\"]\n"
        );
        assert_eq!(warnings_of(&text), Vec::<String>::new());
        let admin_v6 = format!("{BASE}\n[admin]\nlisten = \"[::1]:9090\"\n");
        assert_eq!(warnings_of(&admin_v6), Vec::<String>::new());
    }

    #[test]
    fn a_missing_or_example_hash_secret_is_named() {
        for text in [
            BASE.replace("hash_secret = \"a-long-random-value\"", ""),
            BASE.replace("a-long-random-value", ""),
            BASE.replace("a-long-random-value", "change-me"),
        ] {
            let found = warnings_of(&text);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].starts_with("store.hash_secret: "), "{found:?}");
        }
        let without_store = BASE.replace("[store]\nhash_secret = \"a-long-random-value\"", "");
        assert!(warnings_of(&without_store)[0].starts_with("store.hash_secret: not set"));
        assert!(
            warnings_of(&BASE.replace("a-long-random-value", "change-me"))[0]
                .contains("\"change-me\"")
        );
    }

    #[test]
    fn trusted_ranges_wider_than_the_largest_private_one_are_named() {
        let text = format!(
            "{BASE}\n[client_ip]\ntrusted_proxies = [\"10.0.0.0/8\", \"0.0.0.0/0\", \"::/0\", \"128.0.0.0/1\", \"fc00::/6\", \"not a cidr\", \"2000::/3\", \"fc00::/7\"]\n"
        );
        let found = warnings_of(&text);
        let paths: Vec<&str> = found.iter().map(|w| w.split(':').next().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "client_ip.trusted_proxies[1]",
                "client_ip.trusted_proxies[2]",
                "client_ip.trusted_proxies[3]",
                "client_ip.trusted_proxies[4]",
                "client_ip.trusted_proxies[6]",
            ]
        );
        assert!(
            found[0].contains("\"0.0.0.0/0\" is wider than 10.0.0.0/8"),
            "{found:?}"
        );
        assert!(
            found[1].contains("\"::/0\" is wider than fc00::/7"),
            "{found:?}"
        );
    }

    #[test]
    fn an_admin_listener_off_loopback_is_named() {
        for listen in [
            "0.0.0.0:9090",
            "[::]:9090",
            "10.1.2.3:9090",
            "203.0.113.7:9090",
        ] {
            let text = format!("{BASE}\n[admin]\nlisten = \"{listen}\"\n");
            let found = warnings_of(&text);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(
                found[0].starts_with(&format!("admin.listen: \"{listen}\" is not a loopback")),
                "{found:?}"
            );
        }
    }

    #[test]
    fn a_limit_no_route_names_is_named() {
        let text = format!(
            "{BASE}\n[[limits]]\nname = \"login\"\nkey = [\"ip\"]\nrates = [{{ limit = 1, per = \"1s\" }}]\n"
        );
        assert_eq!(
            warnings_of(&text),
            ["limits[1]: limit \"login\" is used by no route: it counts nothing"]
        );
    }
}
