//! The request pipeline of docs/ARCHITECTURE.md, read top to bottom in `proxy`: request id →
//! header size → canonical request → client ip → route → ip lists, edge and limits → forward
//! → respond, then `record`. Each step lives in its own module. The pipeline decides, then
//! acts, then records: refusals come back as values that `respond` turns into answers, and
//! what a request went through is recorded once, when it is answered (`record.rs`).

mod admit;
pub mod connections;
mod forward;
pub mod headers;
mod health;
pub mod http1;
mod record;
mod stores;
mod tunnel;
pub mod upstream;

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderName, HeaderValue, Response};
use tokio_util::sync::CancellationToken;

use crate::added_fields::Added;
use crate::canonical::ProxyRequest;
use crate::canonical::{self, Host, Request, TrailerFilter};
use crate::client_ip::ClientIpPolicy;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, DeniedLines, ResponseStyle};
use crate::edge::EdgeLayer;
use crate::limit::key::KeyPart;
use crate::limit::limiter::Limiter;
use crate::metrics::{LimitCounters, Metrics, RouteMetrics, UpstreamMetrics};
use crate::request_id::{self, RequestId};
use crate::respond::{self, GatewayError, ResponseBody};
use crate::route::{Route, Router};
use crate::store::redis::StoreError;
use admit::Admission;
use headers::Forwarded;
use prometheus_client::metrics::histogram::Histogram;
use record::RequestLog;
use upstream::{ClientDeadlines, UpstreamPool};

/// Everything a request needs, built once from a validated config.
pub struct Runtime {
    /// How requests are put in canonical form (`[server]` settings).
    pub canonical: canonical::Policy,
    pub router: Router,
    pub upstreams: Vec<Arc<UpstreamPool>>,
    pub max_header_bytes: usize,
    pub client_ip: ClientIpPolicy,
    pub edge: Option<EdgeLayer>,
    pub limiter: Limiter,
    pub response: ResponseStyle,
    /// `[log] access`: one line per request.
    pub access_log: bool,
    /// `[log] denied`: which of the refused requests' lines.
    pub denied_lines: DeniedLines,
    pub clock: Arc<dyn Clock>,
    /// Shared by every runtime of a gateway, across reloads.
    pub metrics: Arc<Metrics>,
    /// Metric handles made once per runtime, so requests allocate no labels: by route index,
    /// by upstream index, and the allowed/denied counters by limit index.
    pub route_metrics: Vec<RouteMetrics>,
    pub upstream_metrics: Vec<UpstreamMetrics>,
    pub limit_counters: Vec<LimitCounters>,
    pub store_latency: Histogram,
}

impl Runtime {
    pub fn new(config: &Config, metrics: Arc<Metrics>) -> Result<Runtime, rustls::Error> {
        Runtime::build(config, Arc::new(SystemClock::new()), metrics, None)
    }

    /// The runtime of a reloaded config: it keeps the limit state of `previous` (limits whose
    /// rates changed get fresh identities), its edge buckets when `[edge]` is unchanged, its
    /// clock, and what its pools know of servers whose definition is unchanged (health, idle
    /// connections; see `UpstreamPool::succeeding`).
    pub fn succeeding(config: &Config, previous: &Runtime) -> Result<Runtime, rustls::Error> {
        Runtime::build(
            config,
            previous.clock.clone(),
            previous.metrics.clone(),
            Some(previous),
        )
    }

    pub fn build(
        config: &Config,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        previous: Option<&Runtime>,
    ) -> Result<Runtime, rustls::Error> {
        let client_deadlines = ClientDeadlines::new(&config.server, metrics.timeouts.clone());
        let upstreams: Result<Vec<_>, _> = config
            .upstreams
            .iter()
            .map(|u| {
                let before = previous.and_then(|p| p.upstreams.iter().find(|b| b.name == u.name));
                let deadlines = client_deadlines.clone();
                UpstreamPool::succeeding(u, deadlines, config.server.workers, before.map(|b| &**b))
                    .map(Arc::new)
            })
            .collect();
        let stores = stores::stores(config, previous.map(|p| p.limiter.stores()), &*clock);
        let limiter = Limiter::new(
            config.limits.clone(),
            config.plans.clone(),
            config.store.hash_secret.as_deref(),
            stores,
        );
        let store_latency = metrics.store_latency(limiter.backend());
        if limiter.stores().redis.is_some() {
            metrics.zero_store_errors(limiter.backend(), &StoreError::KINDS);
        }
        let previous_edge = previous.and_then(|p| p.edge.as_ref());
        Ok(Runtime {
            canonical: canonical_policy(config),
            router: Router::new(&config.routes),
            upstreams: upstreams?,
            max_header_bytes: config.server.max_header_bytes,
            client_ip: config.client_ip.clone(),
            edge: config
                .edge
                .clone()
                .map(|policy| EdgeLayer::reusing(policy, previous_edge)),
            limiter,
            response: config.response.clone(),
            access_log: config.log.access,
            denied_lines: config.log.denied,
            clock,
            route_metrics: config
                .routes
                .iter()
                .map(|r| metrics.route(&r.name))
                .collect(),
            upstream_metrics: config
                .upstreams
                .iter()
                .map(|u| metrics.upstream(&u.name))
                .collect(),
            limit_counters: config
                .limits
                .iter()
                .map(|l| metrics.limit_counters(&l.name))
                .collect(),
            store_latency,
            metrics,
        })
    }

    /// Starts the background work of this runtime (health checks, closing idle upstream
    /// connections) until `stop`.
    pub fn start_background(&self, stop: &CancellationToken) {
        health::spawn_checkers(&self.upstreams, stop);
        if let Some(sync) = self.lease_sync() {
            tokio::spawn(sync.run(stop.clone()));
        }
        let pools = self.upstreams.clone();
        tokio::spawn(connections::close_expired_until(pools, stop.clone()));
    }
}

/// The canonical form settings of `config`. Trailers never carry a field its limits or plans
/// key on.
fn canonical_policy(config: &Config) -> canonical::Policy {
    let plans_key = config.plans.as_ref().map(|plans| &plans.key);
    let keys: Vec<HeaderName> = (config.limits.iter())
        .flat_map(|limit| &limit.key)
        .chain(plans_key)
        .filter_map(|part| match part {
            KeyPart::Header(name) => Some(name.clone()),
            _ => None,
        })
        .collect();
    let underscores = config.server.underscores;
    canonical::Policy {
        escaped_slashes: config.server.escaped_slashes,
        underscores,
        trailers: Arc::new(TrailerFilter::new(keys, underscores)),
    }
}

/// The client side of a connection, as the pipeline sees it.
#[derive(Debug, Clone)]
pub struct ClientConnection {
    pub peer: SocketAddr,
    /// `"http"` or `"https"`, for X-Forwarded-Proto.
    pub proto: &'static str,
    /// The peer's address as X-Forwarded-For gets it, formatted once per connection.
    pub peer_header: HeaderValue,
}

impl ClientConnection {
    pub fn new(peer: SocketAddr, proto: &'static str) -> ClientConnection {
        let address = peer.ip().to_string();
        let peer_header =
            HeaderValue::from_str(&address).unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        ClientConnection {
            peer,
            proto,
            peer_header,
        }
    }
}

/// Answers one request. Never fails: errors become problem+json answers here.
///
/// A plain fn returning an `async move` block, as are the functions it awaits on the way to
/// the upstream: an `async fn` copies each argument into a local of its state, so the request
/// was held twice at every level, and a request's whole state is copied each time it moves
/// (by hyper into its slot, by every caller into its own). For the same reason a future is
/// never captured by a block that then awaits it (held twice: captured and awaited); such
/// callers `map` or `then` it instead.
#[expect(clippy::manual_async_fn)]
pub fn handle(
    runtime: Arc<Runtime>,
    client: ClientConnection,
    request: ProxyRequest,
) -> impl Future<Output = Response<ResponseBody>> {
    async move {
        let (runtime, client) = (&*runtime, &client);
        let started = Instant::now();
        let request_id = request_id::keep_or_mint(&request.fields);
        let mut log = RequestLog::new(runtime);
        // Pinned where it is made: `.await` on the call itself moved the whole future (room
        // for every one of its states, ~100 instructions of memcpy) into place first.
        let proxied = pin!(proxy(runtime, client, request, &request_id, &mut log)).await;
        let mut response = match proxied {
            Ok(response) => response,
            Err(error) => respond::error_response(&error, &request_id),
        };
        // The request's outcome, recorded once: metrics, what admission saw, the access line.
        log.record(client, &request_id, response.status().as_u16(), started);
        let added = response.body_mut().added_mut();
        added.add_composed(Added::RequestId, |out| {
            out.extend_from_slice(request_id.as_bytes())
        });
        response
    }
}

// An `async move` block, not an `async fn`: see `proxy::handle`.
#[expect(clippy::manual_async_fn)]
fn proxy<'r>(
    runtime: &'r Runtime,
    client: &'r ClientConnection,
    request: ProxyRequest,
    request_id: &RequestId,
    log: &mut RequestLog<'r>,
) -> impl Future<Output = Result<Response<ResponseBody>, GatewayError>> {
    async move {
        check_header_size(&request, runtime.max_header_bytes)?;
        if runtime.access_log {
            log.line = Some((request.method.clone(), request.uri.path().to_owned()));
        }
        let request = canonical::canonicalize(request, &runtime.canonical)?;
        if let Some((_, path)) = &mut log.line
            && path != request.path()
        {
            request.path().clone_into(path);
        }
        let client_ip = runtime.client_ip.resolve(client.peer.ip(), &request.fields);
        log.client_ip = Some(client_ip.ip);
        let route = route_of(&runtime.router, &request)?;
        log.route = Some(&route.name);
        let route_metrics = &runtime.route_metrics[route.index];
        log.route_metrics = Some(route_metrics);
        let counted = route_metrics.enter();
        let seen = &mut log.admission;
        let (slot, statuses) =
            match pin!(admit::admit(runtime, route, &request, client_ip, seen)).await {
                Admission::Refused { refusal, by } => {
                    log.refused_by = by;
                    let style = &runtime.response;
                    return Ok(respond::refusal_response(refusal, style, request_id));
                }
                Admission::Admitted {
                    slot,
                    statuses,
                    delay,
                } => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    (slot, statuses)
                }
            };
        log.remaining = statuses.first().map(|s| s.remaining);
        let forwarded = Forwarded {
            peer: &client.peer_header,
            peer_trusted: client_ip.peer_trusted,
            proto: client.proto,
            request_id,
        };
        let upstream = &runtime.upstreams[route.upstream];
        let asked = Instant::now();
        let served_by = &mut log.upstream;
        let upstream_answer = pin!(forward::forward(
            upstream,
            &route.upgrades,
            request,
            &forwarded,
            served_by,
            asked
        ))
        .await;
        let mut response = match upstream_answer {
            Ok(response) => response,
            Err(error) => respond::error_response(&error, request_id),
        };
        log.answered = Some(Instant::now());
        log.upstream_call = Some((&runtime.upstream_metrics[route.upstream], asked));
        respond::add_rate_fields(
            response.body_mut().added_mut(),
            &statuses,
            &runtime.response,
        );
        response.body_mut().hold(slot, counted);
        Ok(response)
    }
}

/// The first route matching the canonical request.
fn route_of<'r>(router: &'r Router, request: &Request) -> Result<&'r Route, GatewayError> {
    let host = request.host.as_ref().map(Host::name);
    let found = router.find(host, request.matched_path(), &request.method);
    found.ok_or_else(|| GatewayError::NoRoute {
        method: request.method.clone(),
        path: request.path().to_string(),
    })
}

/// Enforces `max_header_bytes` on the request line and headers together. hyper's own buffer
/// limit (set larger) stops anything far beyond it before it is parsed.
fn check_header_size(request: &ProxyRequest, limit: usize) -> Result<(), GatewayError> {
    let line = request.method.as_str().len()
        + request.uri.path_and_query().map_or(1, |p| p.as_str().len())
        + 12;
    if line + request.fields.encoded_size() > limit {
        return Err(GatewayError::HeadersTooLarge { limit });
    }
    Ok(())
}
