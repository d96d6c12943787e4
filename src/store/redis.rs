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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::Script;

use super::cluster::{self, Cluster};
use super::connect;
use super::denied::DeniedCache;
use super::node::Node;
use super::script::{self, SCRIPT};
use super::tiers::TierCache;
use crate::limit::WindowCheck;
use crate::limit::window::{Small, WindowRequest};
use crate::rt::clock::Nanos;
use commands::{bulk, hget_on_pipe, load_script, tier_of};

mod commands;
mod inspect;

pub(crate) use super::error::describe_url_error;
pub(crate) use super::redis_config::RedisConfig;
use crate::store::error::ConnectionError;
pub(crate) use crate::store::error::StoreError;

pub(crate) use super::script::EXACT_LIMIT;

const DENIED_CAPACITY: usize = 100_000;

/// What the store said about each window of a request: `None` for windows whose call failed
/// (all of them on a single node; the identities of failed calls on a cluster).
pub struct Outcome {
    pub checks: Small<Option<WindowCheck>>,
    pub error: Option<StoreError>,
}

enum Backend {
    /// One node over TCP, plain or TLS: each worker's calls pipelined and merged.
    Node(Arc<Node>),
    /// A cluster: a node per master, calls routed by slot.
    Cluster(Arc<Cluster>),
    /// The URL or TLS settings could not be used (say, `ca_file` gone since it was checked):
    /// every call fails with why, and the limits follow their `on_error`.
    Unusable(StoreError),
}

pub struct RedisStore {
    config: RedisConfig,
    backend: Backend,
    script: Script,
    pub denied: DeniedCache,
    tiers: TierCache,
    /// Per serving worker: its connections are open and the script loaded (`warm_up`).
    warm: Box<[AtomicBool]>,
    /// Every worker was warm once, with this store or one it succeeded in a reload: readiness
    /// holds from then on, whether `/readyz` was asked then or not.
    reached: Arc<AtomicBool>,
}

impl RedisStore {
    /// Connects lazily, on a worker's first call or its warm-up, so a gateway starts (and
    /// falls back per `on_error`) while Redis is away. The URLs were checked with the config.
    /// `workers`: how many serving workers call it (`[server] workers`).
    pub fn new(config: RedisConfig, workers: usize) -> RedisStore {
        let workers = workers.max(1);
        let backend = backend(&config, workers).unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot set up the limit store; limits follow their on_error");
            Backend::Unusable(error)
        });
        RedisStore {
            config,
            backend,
            script: Script::new(SCRIPT),
            denied: DeniedCache::new(DENIED_CAPACITY),
            tiers: TierCache::default(),
            warm: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            reached: Arc::default(),
        }
    }

    /// A store for a reloaded config that changed `[store]`: new connections, and what
    /// `previous` knew of having been reached.
    pub fn succeeding(config: RedisConfig, workers: usize, previous: &RedisStore) -> RedisStore {
        RedisStore {
            reached: previous.reached.clone(),
            ..RedisStore::new(config, workers)
        }
    }

    /// The cluster, when the store is one.
    pub(crate) fn cluster(&self) -> Option<&Arc<Cluster>> {
        match &self.backend {
            Backend::Cluster(cluster) => Some(cluster),
            Backend::Node(_) | Backend::Unusable(_) => None,
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

    /// Each node's address and whether its breaker is open (a cluster's masters).
    pub fn breakers(&self) -> Vec<(Arc<str>, bool)> {
        let nodes = match &self.backend {
            Backend::Node(node) => vec![node.clone()],
            Backend::Cluster(cluster) => cluster.masters(),
            Backend::Unusable(_) => Vec::new(),
        };
        (nodes.iter())
            .map(|node| (node.address().clone(), node.breaker_open()))
            .collect()
    }

    /// Whether every worker has opened its connections and loaded the script (`warm_up`), now
    /// or before (with this store or one it succeeded).
    pub fn reached(&self) -> bool {
        self.reached.load(Ordering::Acquire)
    }

    /// Opens the calling worker's connections (to every master of a cluster, whose slots it
    /// reads first) and loads the script on them, so the first requests neither connect nor
    /// meet `NOSCRIPT`. Each node's breaker sees the outcome.
    pub async fn warm_up(&self) -> Result<(), StoreError> {
        let wait = self.config.connect_timeout + self.config.timeout;
        let nodes = match &self.backend {
            Backend::Node(node) => vec![node.clone()],
            Backend::Cluster(cluster) => cluster.first_view().await?.masters.clone(),
            Backend::Unusable(error) => return Err(error.clone()),
        };
        let sha = self.script.get_hash();
        let loads = nodes
            .iter()
            .map(|node| node.guarded(load_script(node.pipe(), wait, sha)));
        for loaded in join_all(loads).await {
            loaded?;
        }
        let worker = crate::rt::worker::current() % self.warm.len();
        self.warm[worker].store(true, Ordering::Release);
        if self.warm.iter().all(|warm| warm.load(Ordering::Acquire)) {
            self.reached.store(true, Ordering::Release);
        }
        Ok(())
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
        let wait = self.config.longest_wait();
        let cluster = match &self.backend {
            Backend::Node(node) => {
                return match self.call_node(node, wait, requests, limits, now).await {
                    Ok(checks) => Outcome {
                        checks: checks.into_iter().map(Some).collect(),
                        error: None,
                    },
                    Err(error) => failed_outcome(requests.len(), error),
                };
            }
            Backend::Cluster(cluster) => cluster,
            Backend::Unusable(error) => return failed_outcome(requests.len(), error.clone()),
        };
        let spans = identity_spans(requests);
        let calls = spans.iter().map(|&(start, end)| {
            self.call_cluster(
                cluster,
                wait,
                &requests[start..end],
                &limits[start..end],
                now,
            )
        });
        let results = join_all(calls).await;
        let mut outcome = Outcome {
            checks: Small::new(),
            error: None,
        };
        for (result, &(start, end)) in results.into_iter().zip(&spans) {
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
        let wait = self.config.longest_wait();
        let reply = match &self.backend {
            Backend::Node(node) => {
                let hget = hget_on_pipe(node.pipe(), wait, hash, field);
                Box::pin(node.guarded(hget)).await
            }
            Backend::Cluster(cluster) => {
                let request = cluster::Request::Hget { hash, field };
                Box::pin(cluster.call(hash.as_bytes(), wait, &request)).await
            }
            Backend::Unusable(_) => return None,
        };
        let tier = match reply.and_then(tier_of) {
            Ok(tier) => tier.map(Arc::from),
            Err(error) => {
                tracing::debug!(%error, "cannot read a tier from redis");
                return None;
            }
        };
        self.tiers.put(hash, field, tier.clone(), now);
        Some(tier)
    }

    /// One script call on the single node, merged with the worker's other calls.
    async fn call_node(
        &self,
        node: &Node,
        wait: Duration,
        requests: &[WindowRequest],
        limits: &[&str],
        now: Option<Nanos>,
    ) -> Result<Small<WindowCheck>, StoreError> {
        if requests.is_empty() {
            // Nothing to check; merged with other calls it would fail them all.
            return Ok(Small::new());
        }
        let call = self.script_call(requests, limits, now);
        let reply = node.guarded(node.pipe().call_merged(wait, &call)).await?;
        script::parse_reply(&bulk(reply)?, requests.len())
    }

    /// One identity's script call on the master of its slot.
    async fn call_cluster(
        &self,
        cluster: &Arc<Cluster>,
        wait: Duration,
        requests: &[WindowRequest],
        limits: &[&str],
        now: Option<Nanos>,
    ) -> Result<Small<WindowCheck>, StoreError> {
        if requests.is_empty() {
            return Ok(Small::new());
        }
        let call = self.script_call(requests, limits, now);
        let key = script::first_key(&call);
        // Boxed: routing and redirections would make every single-node call's future as large.
        let request = cluster::Request::Script(&call);
        let reply = Box::pin(cluster.call(&key, wait, &request)).await?;
        script::parse_reply(&bulk(reply)?, requests.len())
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
}

/// The single node or the cluster of `config`.
fn backend(config: &RedisConfig, workers: usize) -> Result<Backend, StoreError> {
    let longest_call = config.longest_wait();
    if !config.cluster {
        let url = config.urls.first().map_or("", String::as_str);
        let (session, (host, port)) = connect::session(config, url, false)?;
        let node = Node::new(session.node(&host, port)?, workers, longest_call);
        return Ok(Backend::Node(Arc::new(node)));
    }
    let mut seeds = Vec::new();
    let mut first_session = None;
    for url in &config.urls {
        let (session, address) = connect::session(config, url, true)?;
        first_session.get_or_insert(session);
        seeds.push(address);
    }
    let session = first_session.ok_or(ConnectionError::NoSeed)?;
    let cluster = Cluster::new(
        seeds,
        session,
        workers,
        longest_call,
        config.connect_timeout + config.timeout,
    );
    Ok(Backend::Cluster(Arc::new(cluster)))
}

/// The `[start, end)` index ranges of the windows of each identity (adjacent, as the limiter
/// builds them).
pub(super) fn identity_spans(requests: &[WindowRequest]) -> Small<(usize, usize)> {
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
