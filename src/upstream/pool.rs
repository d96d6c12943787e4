//! Upstream pools: the servers of one `[[upstreams]]` entry, which of them may take traffic,
//! and how the next one is picked. A server is available when active health checks have not
//! marked it down and it is not ejected for a refused connection. A reload hands what a pool
//! knows of a server (health, idle connections) to the next pool while its definition holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, Uri};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

use super::connections::{Connections, PooledBody, SendError};
use super::exchange::{ClientDeadlines, UpstreamBody, UpstreamHead};
use super::headers::SetFields;
use super::health::ServerHealth;
use super::http1::ExchangeDeadlines;
use crate::config::{Balance, HealthCheck, UpstreamConfig, UpstreamServer};
use crate::tls::upstream::{UpstreamTls, client_config};

/// One server and what the gateway currently knows about it.
#[derive(Debug)]
pub(crate) struct ServerState {
    pub server: UpstreamServer,
    /// `scheme://authority`, for logs and errors.
    pub label: String,
    /// Where connections go: scheme and authority.
    pub address: Uri,
    /// The Host header for a request that came without one (HTTP/1.0).
    pub host: Bytes,
    in_flight: AtomicUsize,
    /// Shared with the pools of the runtimes before and after this one while the server's
    /// definition holds.
    pub health: Arc<ServerHealth>,
}

/// The servers of one upstream with their pooled keep-alive connections.
pub(crate) struct UpstreamPool {
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
    health_terms: HealthTerms,
    connection_terms: ConnectionTerms,
}

/// Besides its address, what decides whether a server passes checks or gets ejected: while
/// these stay the same, what was learned of its health still holds.
#[derive(Debug, PartialEq)]
struct HealthTerms {
    health_check: Option<HealthCheck>,
    ejection_time: Duration,
    connect_timeout: Duration,
    tls: UpstreamTls,
}

/// Besides its address, what a connection to a server was made and keeps being used with: while
/// these stay the same, its idle connections serve the next pool as well as they did this one.
#[derive(Debug, PartialEq)]
struct ConnectionTerms {
    tls: UpstreamTls,
    read_timeout: Duration,
    body_read_timeout: Duration,
    workers: usize,
}

impl UpstreamPool {
    #[cfg(test)]
    /// A pool for `workers` serving threads (see `crate::rt::worker`).
    pub(crate) fn new(
        config: &UpstreamConfig,
        client_deadlines: ClientDeadlines,
        workers: usize,
    ) -> Result<UpstreamPool, rustls::Error> {
        UpstreamPool::succeeding(config, client_deadlines, workers, None)
    }

    /// The pool of a reloaded config, after `previous` (the upstream of the same name). A
    /// server whose address and terms are unchanged keeps its health record, shared rather than
    /// copied, so what the old runtime's last requests and checks learn still counts, and
    /// keeps its idle connections. Any other server starts afresh.
    pub(crate) fn succeeding(
        config: &UpstreamConfig,
        client_deadlines: ClientDeadlines,
        workers: usize,
        previous: Option<&UpstreamPool>,
    ) -> Result<UpstreamPool, rustls::Error> {
        let deadlines = ExchangeDeadlines {
            read_timeout: config.read_timeout,
            body_read_timeout: client_deadlines.body_read,
            counters: client_deadlines.counters.clone(),
        };
        let health_terms = HealthTerms {
            health_check: config.health_check.clone(),
            ejection_time: config.ejection_time,
            connect_timeout: config.connect_timeout,
            tls: config.tls.clone(),
        };
        let connection_terms = ConnectionTerms {
            tls: config.tls.clone(),
            read_timeout: config.read_timeout,
            body_read_timeout: client_deadlines.body_read,
            workers,
        };
        let count = config.servers.len();
        let mut connections = Connections::new(connector(config)?, count, workers, deadlines);
        connections.reuse_after_body = config.reuse_after_body;
        let mut servers = Vec::with_capacity(count);
        for (index, server) in config.servers.iter().enumerate() {
            let before = previous.and_then(|pool| Some((pool, pool.position(server)?)));
            let health = match before {
                Some((pool, at)) if pool.health_terms == health_terms => {
                    pool.servers[at].health.clone()
                }
                _ => Arc::default(),
            };
            if let Some((pool, at)) = before
                && pool.connection_terms == connection_terms
            {
                connections.adopt_idle(index, &pool.connections, at);
            }
            servers.push(ServerState {
                label: server.to_string(),
                address: address(server),
                host: Bytes::copy_from_slice(server.authority.as_str().as_bytes()),
                server: server.clone(),
                in_flight: AtomicUsize::new(0),
                health,
            });
        }
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
            health_terms,
            connection_terms,
        })
    }

    /// Where `server` is in this pool, if it is.
    fn position(&self, server: &UpstreamServer) -> Option<usize> {
        self.servers.iter().position(|s| s.server == *server)
    }

    /// The next available server other than `exclude`, by the configured balance.
    pub(crate) fn pick(&self, exclude: Option<usize>) -> Option<usize> {
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
    pub(crate) fn send(
        &self,
        server: usize,
        request: (UpstreamHead, UpstreamBody),
        mut set: SetFields,
        deadline: tokio::time::Instant,
        may_resend: bool,
    ) -> impl Future<Output = Result<Response<PooledBody>, SendError>> + '_ {
        let target = &self.servers[server];
        if set.host.is_none() {
            set.host = Some(target.host.clone());
        }
        self.connections
            .send(server, &target.address, request, set, deadline, may_resend)
    }

    /// Counts a request against `server` until the returned guard is dropped.
    pub(crate) fn begin(&self, server: usize) -> InFlight<'_> {
        let state = &self.servers[server];
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight { state }
    }

    /// Leaves `server` out for `ejection_time` after it refused a connection.
    pub(crate) fn eject(&self, server: usize) {
        self.servers[server].health.eject(self.ejection_time);
        tracing::warn!(upstream = %self.name, server = %self.servers[server].label,
            for_ms = self.ejection_time.as_millis() as u64, "server ejected after a connection failure");
    }

    /// Feeds one active health check result; returns the new verdict when it changed.
    pub(crate) fn record_check(
        &self,
        server: usize,
        passed: bool,
        check: &HealthCheck,
    ) -> Option<bool> {
        self.servers[server].health.record_check(passed, check)
    }

    /// True when `server` may take traffic now (passes checks, not ejected).
    pub(crate) fn is_available_now(&self, server: usize) -> bool {
        self.servers[server].health.is_available_now()
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
pub(crate) struct InFlight<'a> {
    state: &'a ServerState,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
pub(crate) mod tests;
