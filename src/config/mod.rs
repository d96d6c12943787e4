//! The config contract (docs/ARCHITECTURE.md; every key in docs/configuration.md): the file is
//! parsed into `raw` types, then `validate` turns it into this typed
//! `Config` or into every problem it found, each with its key path. Nothing downstream
//! re-validates.

mod charge;
mod checks;
mod client_fields;
mod defaults;
mod document;
mod duration;
mod environment;
mod limits;
mod network;
mod overlaps;
mod plans;
mod problems;
mod rates;
mod raw;
mod requests;
mod response;
mod server;
mod store;
mod tls;
mod upstreams;
mod validate;

pub(crate) use crate::request::route::RouteConfig;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::admission::edge::EdgePolicy;
use crate::limit::rules::{LimitRule, OnError, Plans};
use crate::request::canonical::{EscapedSlashes, Underscores};
use crate::request::client_fields::ClientFields;
use crate::request::client_ip::ClientIpPolicy;
pub(crate) use crate::store::redis::RedisConfig;
use crate::tls::upstream::UpstreamTls;
use http::uri::{Authority, Scheme};

pub use duration::parse_duration;
pub(crate) use network::{IpLists, parse_cidr};
pub use problems::MAX_PROBLEMS;
pub(crate) use tls::TlsListenerConfig;

/// A validated configuration, ready to serve.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the config came from (a path, or a label for built-in configs); used in messages.
    pub source: String,
    pub server: ServerConfig,
    pub client_ip: ClientIpPolicy,
    /// `[client_ip]`'s fields naming the client on a request's way upstream.
    pub client_fields: Arc<ClientFields>,
    pub ip_lists: IpLists,
    /// `None` when there is no `[edge]` section: no per-IP layer.
    pub edge: Option<EdgePolicy>,
    pub store: StoreConfig,
    pub response: ResponseStyle,
    pub limits: Vec<LimitRule>,
    pub plans: Option<Plans>,
    /// Things an operator should see that do not stop the config from loading.
    pub warnings: Vec<String>,
    /// Files the config read besides itself (lists, plans, certificates), for reloads.
    pub files: Vec<std::path::PathBuf>,
    /// `[admin] listen`: where /healthz, /readyz, /metrics and /config are served.
    pub admin: Option<SocketAddr>,
    pub log: LogConfig,
    /// What /config shows: the config as JSON with secrets redacted, its version and load time.
    pub document: serde_json::Value,
    pub upstreams: Vec<UpstreamConfig>,
    pub routes: Vec<RouteConfig>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: Vec<SocketAddr>,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Longest wait for the next bytes of a request body the gateway asked for.
    pub body_read_timeout: Duration,
    /// Longest a response may make no progress towards a client that is not reading it.
    pub send_timeout: Duration,
    /// An upgraded tunnel with no bytes either way this long is closed.
    pub tunnel_idle_timeout: Duration,
    /// `send_timeout` for an upgraded tunnel.
    pub tunnel_send_timeout: Duration,
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub shutdown_grace: Duration,
    /// Threads serving connections, each with its own event loop (`[server] workers`).
    pub workers: usize,
    /// HTTPS listeners (`[[server.tls]]`).
    pub tls: Vec<TlsListenerConfig>,
    /// `underscores_in_headers`: fields whose names have a `_`.
    pub underscores: Underscores,
    /// `escaped_slashes`: `%2F` and `%5C` in paths.
    pub escaped_slashes: EscapedSlashes,
    /// `allow_trace`: TRACE is forwarded; otherwise it is answered 405.
    pub allow_trace: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    RoundRobin,
    LeastRequests,
}

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub name: String,
    pub servers: Vec<UpstreamServer>,
    pub balance: Balance,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// Longest wait for the next bytes of a response body once its head arrived.
    pub read_timeout: Duration,
    /// Whether a connection that carried a request body answered with a 2xx may be reused.
    pub reuse_after_body: bool,
    /// How long a server that refused a connection is left out before it is tried again.
    pub ejection_time: Duration,
    pub health_check: Option<HealthCheck>,
    /// Used for `https://` servers.
    pub tls: UpstreamTls,
}

/// One upstream server: where requests for it are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamServer {
    pub scheme: Scheme,
    pub authority: Authority,
}

impl fmt::Display for UpstreamServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
}

/// `[log]`: JSON or text lines, and whether to write one access line per request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogConfig {
    pub json: bool,
    pub access: bool,
    /// Which access lines of refused requests are written (`denied`).
    pub denied: DeniedLines,
}

/// `[log] denied`: the access lines of requests the edge or a limit refused. A flood of 429s
/// writes a line each by default, which can cost more than answering them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeniedLines {
    /// `"all"`: every one.
    #[default]
    All,
    /// `"none"`: none.
    Skip,
    /// `"1/N"`: the first and then every Nth, counted per worker thread.
    OneIn(std::num::NonZeroU32),
}

/// `[store]`: where limit state lives.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub hash_secret: Option<String>,
    /// Memory store bound: how many windows it may hold.
    pub max_entries: usize,
    /// The default `on_error` of limits.
    pub on_error: OnError,
    /// The Redis backends; None for the memory store.
    pub redis: Option<RedisConfig>,
    /// `on_error = "local"` enforces each limit divided by this.
    pub fallback_instances: u64,
    /// `/readyz` answers 503 until every worker has reached Redis (connected, script loaded).
    pub ready_requires_redis: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            hash_secret: None,
            max_entries: 4_000_000,
            on_error: OnError::Local,
            redis: None,
            fallback_instances: 1,
            ready_requires_redis: false,
        }
    }
}

/// `[response]`: which rate-limit header families to send and the 429 problem type.
#[derive(Debug, Clone)]
pub struct ResponseStyle {
    pub x_ratelimit: bool,
    pub ietf: bool,
    pub problem_type: Arc<str>,
}

impl Default for ResponseStyle {
    fn default() -> Self {
        ResponseStyle {
            x_ratelimit: true,
            ietf: true,
            problem_type: Arc::from("about:blank"),
        }
    }
}

/// One thing wrong with a config, at a key path such as `routes[2].upstream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// Why a config could not be loaded. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read the config file: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {location}{path}: {message}")]
    Syntax {
        file: String,
        /// `line L, column C: ` when known.
        location: String,
        path: String,
        message: String,
    },
    #[error("{}", render_problems(file, problems, *omitted))]
    Invalid {
        file: String,
        /// The first `MAX_PROBLEMS` found.
        problems: Vec<Problem>,
        /// How many more were found.
        omitted: usize,
    },
}

fn render_problems(file: &str, problems: &[Problem], omitted: usize) -> String {
    let mut lines: Vec<String> = problems
        .iter()
        .map(|p| format!("{file}: {}: {}", p.path, p.message))
        .collect();
    if omitted > 0 {
        lines.push(format!(
            "{file}: and {omitted} more problems (only the first {} are listed)",
            problems.len()
        ));
    }
    lines.join("\n")
}

impl ConfigError {
    /// The problems found by validation (empty for read and syntax errors).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

/// Reads and validates the config file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: file.clone(),
        source,
    })?;
    parse_str(&text, &file)
}

/// Parses and validates config text; `source` names it in every message.
pub fn parse_str(text: &str, source: &str) -> Result<Config, ConfigError> {
    parse_with_environment(text, source, &|name| std::env::var(name).ok())
}

/// `parse_str` with `${NAME}` looked up by `lookup` (`environment`); the safety warnings
/// (`checks`) join the config's own.
fn parse_with_environment(
    text: &str,
    source: &str,
    lookup: environment::Lookup<'_>,
) -> Result<Config, ConfigError> {
    let mut raw = parse_raw(text, source)?;
    let unexpanded = environment::expand_config(&mut raw, lookup);
    let warnings = checks::warnings(&raw);
    let validated = validate::validate(raw, source);
    let mut config = environment::with_problems(validated, unexpanded, source)?;
    let room = MAX_PROBLEMS.saturating_sub(config.warnings.len());
    let warnings = warnings.iter().take(room).map(ToString::to_string);
    config.warnings.extend(warnings);
    let mut document = document::describe(text, source);
    if let Some(written) = document.get_mut("config") {
        defaults::fill(written, &config);
    }
    config.document = document;
    Ok(config)
}

fn parse_raw(text: &str, source: &str) -> Result<raw::RawConfig, ConfigError> {
    let syntax_error = |path: String, error: &toml::de::Error| ConfigError::Syntax {
        file: source.to_string(),
        location: error
            .span()
            .map(|span| line_and_column(text, span.start))
            .unwrap_or_default(),
        path: problems::clip(&path),
        message: problems::clip(error.message().trim()),
    };
    let deserializer =
        toml::Deserializer::parse(text).map_err(|e| syntax_error("(top)".into(), &e))?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        syntax_error(if path == "." { "(top)".into() } else { path }, e.inner())
    })
}

fn line_and_column(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("line {line}, column {column}: ")
}
