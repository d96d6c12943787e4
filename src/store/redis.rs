//! The shared store: limit state in Redis or Redis Cluster, so a fleet of gateways together
//! admits exactly the limit. Every window of a request goes to Redis in one script call (one
//! round trip, all-or-nothing); on a cluster, one call per limit identity, concurrently, since
//! the windows of one identity share a hash tag and so a slot. Redis' own clock decides.
//!
//! Key layout: `{key_prefix}{limit}:{{identity}}`, the identity being the 128-bit keyed hash
//! in URL-safe base64 (never a raw key), e.g. `rl:per-key:{XUFAKrxLKna5cZ2REBfFkg}`: one short
//! string holding every token bucket, GCRA or window-counter window of that identity (see
//! `lua/common.lua`); a sliding log's window is a sorted set of its own, the same key with
//! `:{window}` added. Every write sets each window's expiry at the time it is whole again and
//! the key's at the latest of them, so idle keys vanish.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, IntoConnectionInfo, Script};
use rustls::pki_types::ServerName;
use tokio::sync::OnceCell;

use super::breaker::Breaker;
use super::denied::DeniedCache;
use super::pipe::{self, Pipe, Reply};
use super::script::{self, SCRIPT};
use super::{Small, WindowRequest};
use crate::clock::Nanos;
use crate::limit::WindowCheck;

/// Lua numbers are doubles: integers are exact below 2^53.
pub const EXACT_LIMIT: u64 = 1 << 53;

const BREAKER_FAILURES: u32 = 5;
const BREAKER_OPEN_FOR: Duration = Duration::from_secs(1);
const DENIED_CAPACITY: usize = 100_000;
const TIER_CACHE_CAPACITY: usize = 100_000;

/// `[store]` for the Redis backends.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    pub cluster: bool,
    /// One URL, or the seed nodes of a cluster. May carry a password: never log them.
    pub urls: Vec<String>,
    pub timeout: Duration,
    pub key_prefix: String,
    /// PEM roots to verify `rediss://` servers with, instead of the system's.
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("cluster", &self.cluster)
            .field("nodes", &self.urls.len())
            .field("timeout", &self.timeout)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("circuit breaker open")]
    BreakerOpen { retry_in: Duration },
    #[error("connection: {0}")]
    Connection(String),
    #[error("redis answered with an error: {0}")]
    Server(String),
    #[error("unexpected reply: {0}")]
    Protocol(String),
}

impl StoreError {
    /// The `kind` label of `rlp_store_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::BreakerOpen { .. } => "breaker_open",
            StoreError::Connection(_) => "connection",
            StoreError::Server(_) => "server",
            StoreError::Protocol(_) => "protocol",
        }
    }

    /// When a client refused for this error may try again.
    pub fn retry_in(&self) -> Duration {
        match self {
            StoreError::BreakerOpen { retry_in } => *retry_in,
            _ => BREAKER_OPEN_FOR,
        }
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(error: redis::RedisError) -> Self {
        if error.is_timeout() {
            StoreError::Timeout(Duration::ZERO)
        } else if error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
        {
            StoreError::Connection(error.to_string())
        } else {
            StoreError::Server(error.to_string())
        }
    }
}

/// What the store said about each window of a request: `None` for windows whose call failed
/// (all of them on a single node; the identities of failed calls on a cluster).
pub struct Outcome {
    pub checks: Small<Option<WindowCheck>>,
    pub error: Option<StoreError>,
}

enum Connection {
    /// One node over TCP, plain or TLS: the worker's own pipelined connection.
    Pipe(Pipe),
    /// A cluster: the redis crate's, which follows slots and redirections.
    Cluster(ClusterConnection),
}

pub struct RedisStore {
    config: RedisConfig,
    /// One per serving worker (see `crate::worker`): each worker's calls go out on its own
    /// connection, whose driver task runs on that worker's event loop. Shared, every worker
    /// but the first to connect would hop threads twice per call.
    connections: Box<[OnceCell<Connection>]>,
    script: Script,
    breaker: Breaker,
    pub denied: DeniedCache,
    tiers: TierCache,
}

impl RedisStore {
    /// Connects lazily, on a worker's first call, so a gateway starts (and falls back per
    /// `on_error`) while Redis is away. The URLs were checked with the config. `workers`:
    /// how many serving workers call it (`[server] workers`).
    pub fn new(config: RedisConfig, workers: usize) -> RedisStore {
        RedisStore {
            config,
            connections: (0..workers.max(1)).map(|_| OnceCell::new()).collect(),
            script: Script::new(SCRIPT),
            breaker: Breaker::new(BREAKER_FAILURES, BREAKER_OPEN_FOR),
            denied: DeniedCache::new(DENIED_CAPACITY),
            tiers: TierCache::default(),
        }
    }

    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// The `backend` label of metrics.
    pub fn backend(&self) -> &'static str {
        if self.config.cluster {
            "redis-cluster"
        } else {
            "redis"
        }
    }

    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Checks every window (`limits[i]` is the name of the limit of `requests[i]`). `now` is
    /// for tests that compare with the Rust algorithms; in service it is None and Redis' TIME
    /// decides.
    pub async fn check_all(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
        now: Option<Nanos>,
    ) -> Outcome {
        if let Err(retry_in) = self.breaker.permit(Instant::now()) {
            return failed_outcome(requests.len(), StoreError::BreakerOpen { retry_in });
        }
        if !self.config.cluster {
            let result = self.call(requests, limits, now).await;
            self.record(&result);
            return match result {
                Ok(checks) => Outcome {
                    checks: checks.into_iter().map(Some).collect(),
                    error: None,
                },
                Err(error) => failed_outcome(requests.len(), error),
            };
        }
        let spans = identity_spans(requests);
        let calls = spans
            .iter()
            .map(|&(start, end)| self.call(&requests[start..end], &limits[start..end], now));
        let results = join_all(calls).await;
        let mut outcome = Outcome {
            checks: Small::new(),
            error: None,
        };
        for (result, &(start, end)) in results.into_iter().zip(&spans) {
            self.record(&result);
            match result {
                Ok(checks) => outcome.checks.extend(checks.into_iter().map(Some)),
                Err(error) => {
                    outcome.checks.extend((start..end).map(|_| None));
                    outcome.error = Some(error);
                }
            }
        }
        outcome
    }

    /// The tier stored for `field` in the hash `hash`, cached for `ttl`. None when Redis
    /// cannot say (the caller falls back to the plans file).
    pub async fn tier(&self, hash: &str, ttl: Duration, field: &[u8]) -> Option<Option<Arc<str>>> {
        let now = Instant::now();
        if let Some(tier) = self.tiers.get(hash, field, now, ttl) {
            return Some(tier);
        }
        self.breaker.permit(now).ok()?;
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let read = async {
            let tier: Option<String> = match self.connection().await? {
                Connection::Pipe(pipe) => hget_on_pipe(pipe, deadline, hash, field).await?,
                Connection::Cluster(connection) => {
                    let mut command = redis::cmd("HGET");
                    command.arg(hash).arg(field);
                    query(connection, &command).await?
                }
            };
            Ok::<_, StoreError>(tier.map(Arc::from))
        };
        let result = match tokio::time::timeout(self.config.timeout, read).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(self.config.timeout)),
        };
        self.record(&result);
        let tier = result.ok()?;
        self.tiers.put(hash, field, tier.clone(), now);
        Some(tier)
    }

    /// Feeds the breaker; its transitions are logged (each failure only at debug: an outage
    /// would otherwise log once per request).
    fn record<T>(&self, result: &Result<T, StoreError>) {
        let backend = self.backend();
        match result {
            Ok(_) => {
                if self.breaker.succeeded() {
                    tracing::info!(
                        backend,
                        "limit store reachable again; limits are exact again"
                    );
                }
            }
            Err(error) => {
                tracing::debug!(backend, %error, "limit store call failed");
                if self.breaker.failed(Instant::now()) {
                    tracing::warn!(backend, %error, "limit store failing; circuit breaker open, limits follow their on_error until a probe succeeds");
                }
            }
        }
    }

    /// One script call under the timeout: the pipe's driver keeps it, a cluster call is
    /// given a timer.
    async fn call(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
        now: Option<Nanos>,
    ) -> Result<Small<WindowCheck>, StoreError> {
        if requests.is_empty() {
            // Nothing to check; merged with other calls it would fail them all.
            return Ok(Small::new());
        }
        let timeout = self.config.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let reply = match self.connection().await? {
            Connection::Pipe(pipe) => {
                self.invoke_on_pipe(pipe, deadline, requests, limits, now)
                    .await
            }
            Connection::Cluster(connection) => {
                // Boxed, timer and all: the crate's futures would make every single-node
                // call as large.
                let invoke = self.invoke_on_cluster(connection, requests, limits, now);
                Box::pin(async {
                    match tokio::time::timeout_at(deadline, invoke).await {
                        Ok(result) => result,
                        Err(_) => Err(StoreError::Timeout(timeout)),
                    }
                })
                .await
            }
        }?;
        script::parse_reply(&reply, requests.len())
    }

    async fn invoke_on_pipe(
        &self,
        pipe: &Pipe,
        deadline: tokio::time::Instant,
        requests: &[WindowRequest],
        limits: &[&str],
        now: Option<Nanos>,
    ) -> Result<Bytes, StoreError> {
        let call = self.script_call(requests, limits, now);
        let reply = pipe.call_script(deadline, &call).await?;
        match reply {
            Reply::Bulk(numbers) => Ok(numbers),
            other => Err(unexpected(&other)),
        }
    }

    async fn invoke_on_cluster(
        &self,
        connection: &ClusterConnection,
        requests: &[WindowRequest],
        limits: &[&str],
        now: Option<Nanos>,
    ) -> Result<Bytes, StoreError> {
        // A batch of this one request: a cluster's keys of different requests may live on
        // different nodes.
        let mut batch = script::Batch::default();
        batch.add(&self.script_call(requests, limits, now));
        let mut command = redis::Cmd::with_capacity(batch.arguments(), batch.bytes());
        batch.write(&mut command);
        let reply: Vec<u8> = match query(connection, &command).await {
            Err(error)
                if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                // A restarted or flushed master: load the script (on every master), retry once.
                self.script.load_async(&mut connection.clone()).await?;
                query(connection, &command).await?
            }
            reply => reply?,
        };
        Ok(Bytes::from(reply))
    }

    /// The script call of `requests` (see `script::ScriptCall`).
    fn script_call<'a>(
        &'a self,
        requests: &'a [WindowRequest],
        limits: &'a [&'a str],
        now: Option<Nanos>,
    ) -> script::ScriptCall<'a> {
        script::ScriptCall {
            sha: self.script.get_hash(),
            key_prefix: &self.config.key_prefix,
            requests,
            limits,
            now,
        }
    }

    /// The calling worker's connection; a first connection (a cluster's takes a while)
    /// within the store's timeout.
    async fn connection(&self) -> Result<&Connection, StoreError> {
        let cell = &self.connections[crate::worker::current() % self.connections.len()];
        match cell.get() {
            Some(connection) => Ok(connection),
            // Boxed: connecting (a cluster's, TLS) would make every call's future as large.
            None => Box::pin(self.first_connection(cell)).await,
        }
    }

    async fn first_connection<'a>(
        &self,
        cell: &'a OnceCell<Connection>,
    ) -> Result<&'a Connection, StoreError> {
        let timeout = self.config.timeout;
        match tokio::time::timeout(timeout, cell.get_or_try_init(|| connect(&self.config))).await {
            Ok(connection) => connection,
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }
}

async fn hget_on_pipe(
    pipe: &Pipe,
    deadline: tokio::time::Instant,
    hash: &str,
    field: &[u8],
) -> Result<Option<String>, StoreError> {
    let hget = |out: &mut Vec<u8>| {
        pipe::Command::new(out, 3)
            .arg(b"HGET")
            .arg(hash.as_bytes())
            .arg(field);
    };
    match pipe.call(deadline, hget).await? {
        Reply::Nil => Ok(None),
        Reply::Bulk(value) => String::from_utf8(value.to_vec())
            .map(Some)
            .map_err(|_| StoreError::Protocol("a tier that is not UTF-8".into())),
        other => Err(unexpected(&other)),
    }
}

fn unexpected(reply: &Reply) -> StoreError {
    StoreError::Protocol(format!("unexpected reply {reply:?}"))
}

async fn connect(config: &RedisConfig) -> Result<Connection, StoreError> {
    let connect_timeout = config.timeout.max(Duration::from_millis(250));
    if config.cluster {
        return Ok(Connection::Cluster(
            connect_cluster(config, connect_timeout).await?,
        ));
    }
    let url = config.urls[0].as_str().into_connection_info()?;
    let (host, port, tls) = match url.addr() {
        ConnectionAddr::Tcp(host, port) => (host, *port, None),
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } => (host, *port, Some(pipe_tls(config, host, *insecure)?)),
        // Unix sockets: the config takes only redis:// and rediss:// URLs.
        _ => {
            return Err(StoreError::Connection(
                "only TCP addresses are supported".into(),
            ));
        }
    };
    let session = url.redis_settings();
    Ok(Connection::Pipe(Pipe::new(pipe::Settings {
        host: host.clone(),
        port,
        username: session.username().map(str::to_string),
        password: session.password().map(str::to_string),
        db: session.db(),
        connect_timeout,
        timeout: config.timeout,
        tls,
    })))
}

/// TLS for a `rediss://` node: verified against `ca_file` or the system roots, as the redis
/// crate would; `#insecure` in the URL turns verification off, as it does there. The roots
/// are read once per worker, at its first connection (a small local file, as the config
/// loader reads it).
fn pipe_tls(config: &RedisConfig, host: &str, insecure: bool) -> Result<pipe::Tls, StoreError> {
    // `read_certs` refuses a file without certificates: empty would mean the system roots.
    let ca_certs = match &config.ca_file {
        Some(path) => crate::tls::read_certs(path).map_err(StoreError::Connection)?,
        None => Vec::new(),
    };
    if insecure {
        tracing::warn!("rediss:// with #insecure: the Redis server's certificate is not verified");
    }
    let settings = crate::tls::upstream::UpstreamTls {
        ca_certs,
        sni: None,
        insecure_skip_verify: insecure,
    };
    let client = crate::tls::upstream::client_config(&settings)
        .map_err(|e| StoreError::Connection(format!("TLS settings: {e}")))?;
    let name = ServerName::try_from(host.to_string())
        .map_err(|_| StoreError::Connection(format!("{host} cannot be a TLS server name")))?;
    Ok(pipe::Tls {
        config: Arc::new(client),
        name,
    })
}

async fn connect_cluster(
    config: &RedisConfig,
    connect_timeout: Duration,
) -> Result<ClusterConnection, StoreError> {
    let mut builder = ClusterClient::builder(config.urls.iter().map(String::as_str))
        .connection_timeout(connect_timeout)
        .response_timeout(config.timeout)
        .retries(1);
    if let Some(path) = &config.ca_file {
        let roots = tokio::fs::read(path)
            .await
            .map_err(|e| StoreError::Connection(format!("cannot read {}: {e}", path.display())))?;
        builder = builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(roots),
        });
    }
    Ok(builder.build()?.get_async_connection().await?)
}

async fn query<T: redis::FromRedisValue>(
    connection: &ClusterConnection,
    command: &redis::Cmd,
) -> redis::RedisResult<T> {
    command.query_async(&mut connection.clone()).await
}

/// The `[start, end)` index ranges of the windows of each identity (adjacent, as the limiter
/// builds them).
fn identity_spans(requests: &[WindowRequest]) -> Small<(usize, usize)> {
    let mut spans = Small::new();
    let mut start = 0;
    while start < requests.len() {
        let identity = requests[start].limit_identity;
        let end = start
            + requests[start..]
                .iter()
                .take_while(|r| r.limit_identity == identity)
                .count();
        spans.push((start, end));
        start = end;
    }
    spans
}

fn failed_outcome(windows: usize, error: StoreError) -> Outcome {
    Outcome {
        checks: (0..windows).map(|_| None).collect(),
        error: Some(error),
    }
}

/// The parse error without the URL itself, which may hold a password.
pub fn describe_url_error(error: &redis::RedisError) -> String {
    let detail = error.detail().unwrap_or_default();
    let detail = if detail.contains('@') { "" } else { detail };
    format!(
        "expected redis://[user:password@]host[:port][/db] or rediss://… ({}{}{})",
        error.category(),
        if detail.is_empty() { "" } else { ": " },
        detail
    )
}

/// hash → field → (tier, when it was read). Nested so that a lookup borrows its keys.
type TierEntries = HashMap<String, HashMap<Vec<u8>, (Option<Arc<str>>, Instant)>>;

/// Tiers read from Redis, by hash and field, for a short while.
#[derive(Default)]
struct TierCache {
    entries: Mutex<TierEntries>,
}

impl TierCache {
    fn get(
        &self,
        hash: &str,
        field: &[u8],
        now: Instant,
        ttl: Duration,
    ) -> Option<Option<Arc<str>>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let (tier, fetched) = entries.get(hash)?.get(field)?;
        (now.saturating_duration_since(*fetched) < ttl).then(|| tier.clone())
    }

    fn put(&self, hash: &str, field: &[u8], tier: Option<Arc<str>>, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let fields = entries.entry(hash.to_string()).or_default();
        if fields.len() >= TIER_CACHE_CAPACITY {
            // Bounded: start over rather than grow; the next requests re-read their tiers.
            fields.clear();
        }
        fields.insert(field.to_vec(), (tier, now));
    }
}
