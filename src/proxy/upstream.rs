//! Upstream pools: the servers of one `[[upstreams]]` entry, which of them may take traffic,
//! and how the next one is picked. A server is available when active health checks have not
//! marked it down and it is not ejected for a refused connection.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{Method, Response, Uri};
use http_body_util::{Either, Empty};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

use super::connections::{Connections, PooledBody, SendError};
use super::headers::SetFields;
use super::http1::ExchangeDeadlines;
use crate::canonical::ClientBody;
use crate::config::{Balance, HealthCheck, ServerConfig, UpstreamConfig, UpstreamServer};
use crate::metrics::TimeoutCounters;
use crate::request_fields::RequestFields;
use crate::tls::upstream::client_config;

/// Body sent upstream: the client's streamed body, or nothing (retries, health checks, and
/// the bodiless requests the gateway's own HTTP/1.1 server reads).
pub type UpstreamBody = Either<ClientBody, Empty<Bytes>>;

/// A request head as it goes upstream: the client's fields, to which the gateway's own are
/// added as it is written (`SetFields`).
#[derive(Clone, Debug)]
pub struct UpstreamHead {
    pub method: Method,
    /// Origin-form.
    pub target: PathAndQuery,
    pub fields: RequestFields,
}

#[cfg(test)]
impl UpstreamHead {
    /// A GET of `target` with no fields, for tests.
    pub(crate) fn get(target: &'static str) -> UpstreamHead {
        UpstreamHead {
            method: Method::GET,
            target: PathAndQuery::from_static(target),
            fields: RequestFields::Map(http::HeaderMap::new()),
        }
    }
}

/// One server and what the gateway currently knows about it.
#[derive(Debug)]
pub struct ServerState {
    pub server: UpstreamServer,
    /// `scheme://authority`, for logs and errors.
    pub label: String,
    /// Where connections go: scheme and authority.
    pub address: Uri,
    /// The Host header for a request that came without one (HTTP/1.0).
    pub host: Bytes,
    in_flight: AtomicUsize,
    passes_checks: AtomicBool,
    check_streak: AtomicU32,
    /// Milliseconds since the pool's epoch until which the server is left out.
    ejected_until_ms: AtomicU64,
}

/// The `[server]` deadlines on the client's side of what a pool carries (its request bodies
/// and upgraded tunnels), and where timeouts are counted.
#[derive(Clone, Default)]
pub struct ClientDeadlines {
    pub body_read: Duration,
    pub tunnel_idle: Duration,
    pub tunnel_send: Duration,
    pub counters: TimeoutCounters,
}

impl ClientDeadlines {
    pub fn new(server: &ServerConfig, counters: TimeoutCounters) -> ClientDeadlines {
        ClientDeadlines {
            body_read: server.body_read_timeout,
            tunnel_idle: server.tunnel_idle_timeout,
            tunnel_send: server.tunnel_send_timeout,
            counters,
        }
    }
}

/// The servers of one upstream with their pooled keep-alive connections.
pub struct UpstreamPool {
    pub name: String,
    pub servers: Vec<ServerState>,
    pub connections: Connections,
    pub response_timeout: Duration,
    pub connect_timeout: Duration,
    pub client_deadlines: ClientDeadlines,
    pub health_check: Option<HealthCheck>,
    balance: Balance,
    ejection_time: Duration,
    next: AtomicUsize,
    epoch: Instant,
}

impl UpstreamPool {
    /// A pool for `workers` serving threads (see `crate::worker`).
    pub fn new(
        config: &UpstreamConfig,
        client_deadlines: ClientDeadlines,
        workers: usize,
    ) -> Result<UpstreamPool, rustls::Error> {
        let deadlines = ExchangeDeadlines {
            read_timeout: config.read_timeout,
            body_read_timeout: client_deadlines.body_read,
            counters: client_deadlines.counters.clone(),
        };
        let servers = config.servers.len();
        let connections = Connections::new(connector(config)?, servers, workers, deadlines);
        let servers = config
            .servers
            .iter()
            .map(|server| ServerState {
                label: server.to_string(),
                address: address(server),
                host: Bytes::copy_from_slice(server.authority.as_str().as_bytes()),
                server: server.clone(),
                in_flight: AtomicUsize::new(0),
                passes_checks: AtomicBool::new(true),
                check_streak: AtomicU32::new(0),
                ejected_until_ms: AtomicU64::new(0),
            })
            .collect();
        Ok(UpstreamPool {
            name: config.name.clone(),
            servers,
            connections,
            response_timeout: config.response_timeout,
            connect_timeout: config.connect_timeout,
            client_deadlines,
            health_check: config.health_check.clone(),
            balance: config.balance,
            ejection_time: config.ejection_time,
            next: AtomicUsize::new(0),
            epoch: Instant::now(),
        })
    }

    /// The next available server other than `exclude`, by the configured balance.
    pub fn pick(&self, exclude: Option<usize>) -> Option<usize> {
        let count = self.servers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % count;
        let candidates = (0..count)
            .map(|offset| (start + offset) % count)
            .filter(|&i| Some(i) != exclude && self.is_available_now(i));
        match self.balance {
            Balance::RoundRobin => candidates.into_iter().next(),
            // Ties go to the first candidate after the rotating start, so equal load spreads.
            Balance::LeastRequests => {
                candidates.min_by_key(|&i| self.servers[i].in_flight.load(Ordering::Relaxed))
            }
        }
    }

    /// Sends `request` with the fields in `set` to `server` on a pooled keep-alive
    /// connection; a request without Host (HTTP/1.0, a health check) gets the server's
    /// authority. The
    /// response head must come by `deadline`.
    pub fn send(
        &self,
        server: usize,
        request: (UpstreamHead, UpstreamBody),
        mut set: SetFields,
        deadline: tokio::time::Instant,
    ) -> impl Future<Output = Result<Response<PooledBody>, SendError>> + '_ {
        let target = &self.servers[server];
        if set.host.is_none() {
            set.host = Some(target.host.clone());
        }
        self.connections
            .send(server, &target.address, request, set, deadline)
    }

    /// Counts a request against `server` until the returned guard is dropped.
    pub fn begin(&self, server: usize) -> InFlight<'_> {
        let state = &self.servers[server];
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight { state }
    }

    /// Leaves `server` out for `ejection_time` after it refused a connection.
    pub fn eject(&self, server: usize) {
        let until = self.now_ms() + self.ejection_time.as_millis() as u64;
        self.servers[server]
            .ejected_until_ms
            .store(until, Ordering::Relaxed);
        tracing::warn!(upstream = %self.name, server = %self.servers[server].label,
            for_ms = self.ejection_time.as_millis() as u64, "server ejected after a connection failure");
    }

    /// Feeds one active health check result; returns the new verdict when it changed.
    pub fn record_check(&self, server: usize, passed: bool, check: &HealthCheck) -> Option<bool> {
        let state = &self.servers[server];
        let currently_up = state.passes_checks.load(Ordering::Relaxed);
        if passed == currently_up {
            state.check_streak.store(0, Ordering::Relaxed);
            return None;
        }
        let streak = state.check_streak.fetch_add(1, Ordering::Relaxed) + 1;
        let needed = if passed {
            check.healthy_threshold
        } else {
            check.unhealthy_threshold
        };
        if streak < needed {
            return None;
        }
        state.check_streak.store(0, Ordering::Relaxed);
        state.passes_checks.store(passed, Ordering::Relaxed);
        if passed {
            // A server that passes checks again is trusted again at once.
            state.ejected_until_ms.store(0, Ordering::Relaxed);
        }
        Some(passed)
    }

    /// True when `server` may take traffic now (passes checks, not ejected). The clock is
    /// read only for a server that was ejected (0: never, or trusted again): a clock read on
    /// every pick was ~60 instructions of every proxied request.
    pub fn is_available_now(&self, server: usize) -> bool {
        let state = &self.servers[server];
        let ejected_until_ms = state.ejected_until_ms.load(Ordering::Relaxed);
        state.passes_checks.load(Ordering::Relaxed)
            && (ejected_until_ms == 0 || ejected_until_ms <= self.now_ms())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// `scheme://authority/`: what the connector is given.
fn address(server: &UpstreamServer) -> Uri {
    Uri::builder()
        .scheme(server.scheme.clone())
        .authority(server.authority.clone())
        .path_and_query("/")
        .build()
        // Cannot fail: scheme and authority were parsed when the config was loaded.
        .unwrap_or_default()
}

/// TCP with the pool's connect timeout, plus TLS for `https://` servers.
fn connector(config: &UpstreamConfig) -> Result<HttpsConnector<HttpConnector>, rustls::Error> {
    let mut tcp = HttpConnector::new();
    tcp.set_connect_timeout(Some(config.connect_timeout));
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    if config.tls.insecure_skip_verify {
        tracing::warn!(upstream = %config.name, "tls_insecure_skip_verify: upstream certificates are not verified");
    }
    let builder = HttpsConnectorBuilder::new()
        .with_tls_config(client_config(&config.tls)?)
        .https_or_http();
    let builder = match &config.tls.sni {
        Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone())),
        None => builder,
    };
    Ok(builder.enable_http1().wrap_connector(tcp))
}

/// An in-flight request on one server; released on drop, also when the client goes away.
pub struct InFlight<'a> {
    state: &'a ServerState,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
pub(crate) mod tests;
