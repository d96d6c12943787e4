//! Raw config → typed `Config`, collecting every problem with its key path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use http::uri::{Scheme, Uri};

use super::raw::{RawConfig, RawHealthCheck, RawRoute, RawServer, RawUpstream};
use super::{
    Balance, Config, ConfigError, HealthCheck, LogConfig, Problem, RouteConfig, ServerConfig,
    UpstreamConfig, UpstreamServer, parse_duration,
};
use super::{limits, network, requests, tls};

#[derive(Default)]
pub(super) struct Problems(Vec<Problem>, Vec<String>, Vec<std::path::PathBuf>);

impl Problems {
    /// A file the config read (a list, plans, a certificate): a change to it means a reload.
    pub(super) fn watch(&mut self, path: &Path) {
        self.2.push(path.to_path_buf());
    }

    /// Something that does not stop the config from loading but an operator should see.
    pub(super) fn warn(&mut self, path: impl Into<String>, warning: Option<String>) {
        if let Some(warning) = warning {
            self.1.push(format!("{}: {warning}", path.into()));
        }
    }

    pub(super) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// A duration at `path`, or `default` when absent; records a problem when unparsable.
    pub(super) fn duration(
        &mut self,
        path: String,
        value: Option<&str>,
        default: Duration,
    ) -> Duration {
        match value.map(parse_duration) {
            None => default,
            Some(Ok(d)) if d.is_zero() => {
                self.push(path, "expected a duration greater than zero");
                default
            }
            Some(Ok(d)) => d,
            Some(Err(message)) => {
                self.push(path, message);
                default
            }
        }
    }

    /// A whole number in `range` at `path`, or `default` when absent.
    pub(super) fn number(
        &mut self,
        path: String,
        value: Option<i64>,
        range: (i64, i64),
        default: i64,
    ) -> i64 {
        match value {
            None => default,
            Some(n) if n >= range.0 && n <= range.1 => n,
            Some(n) => {
                self.push(
                    path,
                    format!(
                        "expected a whole number from {} to {}, got {n}",
                        range.0, range.1
                    ),
                );
                default
            }
        }
    }
}

pub(super) fn validate(raw: RawConfig, source: &str) -> Result<Config, ConfigError> {
    let mut problems = Problems::default();
    let base_dir = Path::new(source).parent().unwrap_or(Path::new("."));
    let mut server = server(&raw.server, &mut problems);
    server.tls = tls::listeners(&raw.server.tls, base_dir, &mut problems);
    let client_ip = network::client_ip(raw.client_ip.as_ref(), &mut problems);
    let ip_lists = network::ip_lists(raw.ip_lists.as_ref(), base_dir, &mut problems);
    let edge = network::edge(raw.edge.as_ref(), &ip_lists, &mut problems);
    let admin = raw
        .admin
        .as_ref()
        .and_then(|a| match a.listen.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                problems.push(
                    "admin.listen",
                    format!(
                        "expected IP:port such as \"127.0.0.1:9090\", got {:?}",
                        a.listen
                    ),
                );
                None
            }
        });
    let log = log_config(raw.log.as_ref(), &mut problems);
    let store = limits::store(raw.store.as_ref(), base_dir, &mut problems);
    let response = limits::response(raw.response.as_ref(), &mut problems);
    let limit_rules = limits::limits(&raw.limits, &ip_lists, store.on_error, &mut problems);
    unique_names(
        limit_rules.iter().map(|l| &*l.name),
        "limits",
        &mut problems,
    );
    if store.redis.is_some() {
        limits::check_redis_arithmetic(&limit_rules, &mut problems);
    }
    let plans = limits::plans(
        raw.plans.as_ref(),
        &limit_rules,
        &store,
        base_dir,
        &mut problems,
    );
    requests::check_underscored_keys(
        server.underscores,
        &limit_rules,
        plans.as_ref(),
        &mut problems,
    );
    let upstreams: Vec<UpstreamConfig> = raw
        .upstreams
        .iter()
        .enumerate()
        .map(|(i, u)| upstream(u, &format!("upstreams[{i}]"), base_dir, &mut problems))
        .collect();
    let upstream_index = unique_names(
        upstreams.iter().map(|u| u.name.as_str()),
        "upstreams",
        &mut problems,
    );
    let routes: Vec<RouteConfig> = raw
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let path = format!("routes[{i}]");
            let mut route = route(r, &path, &upstream_index, &mut problems);
            (route.limits, route.cost, route.max_in_flight) =
                limits::route_limits(r, &path, &limit_rules, &mut problems);
            route
        })
        .collect();
    unique_names(
        routes.iter().map(|r| r.name.as_str()),
        "routes",
        &mut problems,
    );
    if routes.is_empty() {
        problems.push("routes", "expected at least one [[routes]] entry");
    }
    if problems.0.is_empty() {
        Ok(Config {
            source: source.to_string(),
            server,
            client_ip,
            ip_lists,
            edge,
            store,
            response,
            limits: limit_rules,
            plans,
            warnings: problems.1,
            files: problems.2,
            admin,
            log,
            document: serde_json::Value::Null,
            upstreams,
            routes,
        })
    } else {
        Err(ConfigError::Invalid {
            file: source.to_string(),
            problems: problems.0,
        })
    }
}

fn log_config(raw: Option<&super::raw::RawLog>, problems: &mut Problems) -> LogConfig {
    let Some(raw) = raw else {
        return LogConfig::default();
    };
    let json = match raw.format.as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => {
            problems.push(
                "log.format",
                format!("expected \"text\" or \"json\", got {other:?}"),
            );
            false
        }
    };
    LogConfig {
        json,
        access: raw.access.unwrap_or(false),
    }
}

fn server(raw: &RawServer, problems: &mut Problems) -> ServerConfig {
    let default_listen = vec!["0.0.0.0:8080".to_string()];
    let listen_text = raw.listen.as_ref().unwrap_or(&default_listen);
    if listen_text.is_empty() {
        problems.push(
            "server.listen",
            "expected at least one address such as \"0.0.0.0:8080\"",
        );
    }
    let listen = listen_text
        .iter()
        .enumerate()
        .filter_map(|(i, text)| match text.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                problems.push(
                    format!("server.listen[{i}]"),
                    format!("expected IP:port such as \"0.0.0.0:8080\", got {text:?}"),
                );
                None
            }
        })
        .collect();
    ServerConfig {
        listen,
        header_read_timeout: problems.duration(
            "server.header_read_timeout".into(),
            raw.header_read_timeout.as_deref(),
            Duration::from_secs(10),
        ),
        idle_timeout: problems.duration(
            "server.idle_timeout".into(),
            raw.idle_timeout.as_deref(),
            Duration::from_secs(60),
        ),
        max_connections: problems.number(
            "server.max_connections".into(),
            raw.max_connections,
            (1, 10_000_000),
            20_000,
        ) as usize,
        // hyper's HTTP/1 read buffer cannot be smaller than 8 KiB.
        max_header_bytes: problems.number(
            "server.max_header_bytes".into(),
            raw.max_header_bytes,
            (8192, 1 << 24),
            32768,
        ) as usize,
        shutdown_grace: problems.duration(
            "server.shutdown_grace".into(),
            raw.shutdown_grace.as_deref(),
            Duration::from_secs(30),
        ),
        workers: problems.number(
            "server.workers".into(),
            raw.workers,
            (1, MAX_WORKERS),
            default_workers(),
        ) as usize,
        tls: Vec::new(),
        underscores: requests::underscores(raw, problems),
        escaped_slashes: requests::escaped_slashes(raw, problems),
    }
}

const MAX_WORKERS: i64 = 1024;

/// One worker per CPU the process may use, as nginx's `worker_processes auto`.
fn default_workers() -> i64 {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS as usize) as i64)
}

fn upstream(
    raw: &RawUpstream,
    path: &str,
    base_dir: &Path,
    problems: &mut Problems,
) -> UpstreamConfig {
    if raw.servers.is_empty() {
        problems.push(
            format!("{path}.servers"),
            "expected at least one server such as \"http://127.0.0.1:9001\"",
        );
    }
    let servers = raw
        .servers
        .iter()
        .enumerate()
        .filter_map(|(i, text)| match upstream_server(text) {
            Ok(server) => Some(server),
            Err(message) => {
                problems.push(format!("{path}.servers[{i}]"), message);
                None
            }
        })
        .collect();
    let balance = match raw.balance.as_deref() {
        None | Some("round_robin") => Balance::RoundRobin,
        Some("least_requests") => Balance::LeastRequests,
        Some(other) => {
            problems.push(
                format!("{path}.balance"),
                format!("expected \"round_robin\" or \"least_requests\", got {other:?}"),
            );
            Balance::RoundRobin
        }
    };
    UpstreamConfig {
        name: raw.name.clone(),
        servers,
        balance,
        connect_timeout: problems.duration(
            format!("{path}.connect_timeout"),
            raw.connect_timeout.as_deref(),
            Duration::from_secs(2),
        ),
        response_timeout: problems.duration(
            format!("{path}.response_timeout"),
            raw.response_timeout.as_deref(),
            Duration::from_secs(30),
        ),
        ejection_time: problems.duration(
            format!("{path}.ejection_time"),
            raw.ejection_time.as_deref(),
            Duration::from_secs(10),
        ),
        health_check: raw
            .health_check
            .as_ref()
            .map(|h| health_check(h, &format!("{path}.health_check"), problems)),
        tls: tls::upstream_tls(raw, path, base_dir, problems),
    }
}

fn upstream_server(text: &str) -> Result<UpstreamServer, String> {
    let expected = || format!("expected a URL such as \"http://127.0.0.1:9001\", got {text:?}");
    let uri: Uri = text.parse().map_err(|_| expected())?;
    let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
        return Err(expected());
    };
    if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
        return Err(format!("expected an http:// or https:// URL, got {text:?}"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() || authority.as_str().contains('@')
    {
        return Err(format!(
            "expected scheme://host:port with no path, query or user, got {text:?}"
        ));
    }
    Ok(UpstreamServer {
        scheme: scheme.clone(),
        authority: authority.clone(),
    })
}

fn health_check(raw: &RawHealthCheck, path: &str, problems: &mut Problems) -> HealthCheck {
    if !raw.path.starts_with('/') || raw.path.parse::<http::uri::PathAndQuery>().is_err() {
        problems.push(
            format!("{path}.path"),
            format!("expected a path starting with \"/\", got {:?}", raw.path),
        );
    }
    HealthCheck {
        path: raw.path.clone(),
        interval: problems.duration(
            format!("{path}.interval"),
            raw.interval.as_deref(),
            Duration::from_secs(5),
        ),
        timeout: problems.duration(
            format!("{path}.timeout"),
            raw.timeout.as_deref(),
            Duration::from_secs(2),
        ),
        healthy_threshold: problems.number(
            format!("{path}.healthy_threshold"),
            raw.healthy_threshold,
            (1, 100),
            2,
        ) as u32,
        unhealthy_threshold: problems.number(
            format!("{path}.unhealthy_threshold"),
            raw.unhealthy_threshold,
            (1, 100),
            2,
        ) as u32,
    }
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
                    "unknown upstream {:?}; expected one of {known:?}",
                    raw.upstream
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
            format!("expected a host name without port such as \"api.example.com\", got {text:?}"),
        );
    }
    text.to_ascii_lowercase()
}

/// Maps each name to its index; reports empty and duplicate names under `section`.
fn unique_names<'a>(
    names: impl Iterator<Item = &'a str>,
    section: &str,
    problems: &mut Problems,
) -> HashMap<&'a str, usize> {
    let mut index = HashMap::new();
    for (i, name) in names.enumerate() {
        if name.trim().is_empty() {
            problems.push(format!("{section}[{i}].name"), "expected a non-empty name");
        } else if let Some(first) = index.insert(name, i) {
            index.insert(name, first);
            problems.push(
                format!("{section}[{i}].name"),
                format!("duplicate name {name:?}; {section}[{first}] already uses it"),
            );
        }
    }
    index
}
