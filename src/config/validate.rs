//! Raw config → typed `Config`, collecting every problem with its key path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use super::problems::{Problems, echo};
use super::raw::{RawAdmin, RawConfig, RawRoute, RawUpstream};
use super::server::{log_config, server};
use super::upstreams::upstream;
use super::{Config, ConfigError, RouteConfig, UpstreamConfig};
use super::{client_fields, limits, network, overlaps, plans, requests, response, store, tls};
use crate::limit::rules::LimitRule;

pub(super) fn validate(raw: RawConfig, source: &str) -> Result<Config, ConfigError> {
    let mut problems = Problems::default();
    let base_dir = Path::new(source).parent().unwrap_or(Path::new("."));
    let mut server = server(&raw.server, &mut problems);
    server.tls = tls::listeners(&raw.server.tls, base_dir, &mut problems);
    let client_ip = network::client_ip(raw.client_ip.as_ref(), &mut problems);
    let client_fields =
        client_fields::client_fields(raw.client_ip.as_ref(), client_ip.header, &mut problems);
    let ip_lists = network::ip_lists(raw.ip_lists.as_ref(), base_dir, &mut problems);
    let edge = network::edge(raw.edge.as_ref(), &ip_lists, &mut problems);
    let admin = raw
        .admin
        .as_ref()
        .and_then(|a| admin_listen(a, &mut problems));
    let log = log_config(raw.log.as_ref(), &mut problems);
    let store = store::store(raw.store.as_ref(), base_dir, &mut problems);
    let response = response::response(raw.response.as_ref(), &mut problems);
    let limit_rules = limits::limits(&raw.limits, &ip_lists, store.on_error, &mut problems);
    unique_names(
        limit_rules.iter().map(|l| &*l.name),
        "limits",
        &mut problems,
    );
    if store.redis.is_some() {
        store::check_redis_arithmetic(&limit_rules, &mut problems);
        store::check_redis_charges(&limit_rules, &mut problems);
    }
    let plans = plans::plans(
        raw.plans.as_ref(),
        &limit_rules,
        &store,
        &ip_lists,
        base_dir,
        &mut problems,
    );
    overlaps::warn_about_overlaps(edge.as_ref(), plans.as_ref(), &mut problems);
    requests::check_underscored_keys(
        server.underscores,
        &limit_rules,
        plans.as_ref(),
        &mut problems,
    );
    let upstreams = upstreams(&raw.upstreams, base_dir, &mut problems);
    let upstream_index = unique_names(
        upstreams.iter().map(|u| u.name.as_str()),
        "upstreams",
        &mut problems,
    );
    let routes = routes(&raw.routes, &upstream_index, &limit_rules, &mut problems);
    requests::check_trace_routes(server.allow_trace, &raw.routes, &mut problems);
    unique_names(
        routes.iter().map(|r| r.name.as_str()),
        "routes",
        &mut problems,
    );
    if routes.is_empty() {
        problems.push("routes", "expected at least one [[routes]] entry");
    }
    if !problems.is_empty() {
        return Err(invalid(problems, source));
    }
    let (_, _, warnings, files) = problems.into_parts();
    Ok(Config {
        source: source.to_string(),
        server,
        client_ip,
        client_fields: Arc::new(client_fields),
        ip_lists,
        edge,
        store,
        response,
        limits: limit_rules,
        plans,
        warnings,
        files,
        admin,
        log,
        document: serde_json::Value::Null,
        upstreams,
        routes,
    })
}

/// `[admin] listen`.
fn admin_listen(raw: &RawAdmin, problems: &mut Problems) -> Option<SocketAddr> {
    match raw.listen.parse::<SocketAddr>() {
        Ok(addr) => Some(addr),
        Err(_) => {
            problems.push(
                "admin.listen",
                format!(
                    "expected IP:port such as \"127.0.0.1:9090\", got {}",
                    echo(&raw.listen)
                ),
            );
            None
        }
    }
}

fn invalid(problems: Problems, source: &str) -> ConfigError {
    let (problems, omitted, _, _) = problems.into_parts();
    ConfigError::Invalid {
        file: source.to_string(),
        problems,
        omitted,
    }
}

fn upstreams(raw: &[RawUpstream], base_dir: &Path, problems: &mut Problems) -> Vec<UpstreamConfig> {
    raw.iter()
        .enumerate()
        .map(|(i, u)| upstream(u, &format!("upstreams[{i}]"), base_dir, problems))
        .collect()
}

fn routes(
    raw: &[RawRoute],
    upstreams: &HashMap<&str, usize>,
    limits: &[LimitRule],
    problems: &mut Problems,
) -> Vec<RouteConfig> {
    raw.iter()
        .enumerate()
        .map(|(i, r)| {
            let path = format!("routes[{i}]");
            let mut route = route(r, &path, upstreams, problems);
            (route.limits, route.cost, route.max_in_flight) =
                limits::route_limits(r, &path, limits, problems);
            route
        })
        .collect()
}

fn route(
    raw: &RawRoute,
    path: &str,
    upstreams: &HashMap<&str, usize>,
    problems: &mut Problems,
) -> RouteConfig {
    let path_prefix = requests::path_prefix(raw, path, problems);
    let upstream = upstreams
        .get(raw.upstream.as_str())
        .copied()
        .unwrap_or_else(|| {
            let mut known: Vec<&str> = upstreams.keys().copied().collect();
            known.sort_unstable();
            problems.push(
                format!("{path}.upstream"),
                format!(
                    "unknown upstream {}; expected one of {known:?}",
                    echo(&raw.upstream)
                ),
            );
            0
        });
    RouteConfig {
        name: raw.name.clone(),
        host: raw
            .host
            .as_deref()
            .map(|h| route_host(h, &format!("{path}.host"), problems)),
        path_prefix,
        case_sensitive: raw.case_sensitive.unwrap_or(true),
        methods: raw
            .methods
            .as_ref()
            .map(|m| requests::methods(m, &format!("{path}.methods"), problems)),
        upgrades: requests::upgrades(raw, path, problems),
        upstream,
        limits: Vec::new(),
        cost: 1,
        max_in_flight: None,
    }
}

fn route_host(text: &str, path: &str, problems: &mut Problems) -> String {
    if text.is_empty() || text.parse::<http::uri::Authority>().is_err() || text.contains(':') {
        problems.push(
            path,
            format!(
                "expected a host name without port such as \"api.example.com\", got {}",
                echo(text)
            ),
        );
    }
    text.to_ascii_lowercase()
}

/// Longest name of a limit, upstream or route.
const MAX_NAME_BYTES: usize = 128;

/// Maps each name to its index; reports empty, overlong and duplicate names under `section`.
fn unique_names<'a>(
    names: impl Iterator<Item = &'a str>,
    section: &str,
    problems: &mut Problems,
) -> HashMap<&'a str, usize> {
    let mut index = HashMap::new();
    for (i, name) in names.enumerate() {
        if name.trim().is_empty() {
            problems.push(format!("{section}[{i}].name"), "expected a non-empty name");
        } else if name.len() > MAX_NAME_BYTES {
            // Names are metric labels and log fields: each scrape and line repeats them.
            problems.push(
                format!("{section}[{i}].name"),
                format!(
                    "expected a name of at most {MAX_NAME_BYTES} bytes, got {}",
                    echo(name)
                ),
            );
        } else if let Some(first) = index.insert(name, i) {
            index.insert(name, first);
            problems.push(
                format!("{section}[{i}].name"),
                format!(
                    "duplicate name {}; {section}[{first}] already uses it",
                    echo(name)
                ),
            );
        }
    }
    index
}
