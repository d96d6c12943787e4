//! The admin listener (loopback by default, never the proxy listeners): `/healthz` (process
//! alive), `/readyz` (serving; with `[store] ready_requires_redis`, once every worker has
//! reached Redis; 503 while draining), `/metrics` (Prometheus text, or OpenMetrics when asked)
//! `/config` (the effective config as JSON, secrets redacted, with its version and load
//! time), `/debug/limited` (the most denied) and `/limits/<name>/state` and `/reset` (one
//! identity's standing under a limit, and clearing it: `limits.rs`). It keeps answering through a shutdown's drain and stops when serving ends.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

mod limits;

use super::reload::Generation;
use crate::metrics::{Exposition, LabelText, Metrics, NodeLabel, UpstreamServerLabels};
use crate::rt::shortage::Site;
use crate::runtime::Runtime;

#[derive(Clone)]
pub(super) struct AdminState {
    pub runtime: Arc<ArcSwap<Runtime>>,
    pub generation: Arc<Mutex<Generation>>,
    pub metrics: Arc<Metrics>,
    /// `/readyz` has answered 200: it does from then on (see `readiness`).
    pub ready: Arc<AtomicBool>,
    /// Shutting down: the proxy listeners are closed and the requests in flight finishing.
    pub draining: Arc<AtomicBool>,
}

/// The longest an admin connection lives: scrapers reconnect, and a peer that stops reading
/// an answer must not hold its buffers for good.
const MAX_CONNECTION_LIFE: Duration = Duration::from_secs(300);

/// Serves admin requests until `stop`; a connection that sends no complete request head
/// within `header_read_timeout` (also between keep-alive requests) is closed.
pub(super) async fn serve(
    listener: TcpListener,
    state: AdminState,
    header_read_timeout: Duration,
    stop: CancellationToken,
) {
    let mut errors = super::accept_errors::AcceptErrors::new(Site::AdminAccept);
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    errors.failed(error).await;
                    continue;
                }
            },
        };
        let state = state.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, &request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            // A scraper's keep-alive connection must not outlive serving.
            tokio::select! {
                _ = connection => {}
                _ = tokio::time::sleep(MAX_CONNECTION_LIFE) => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

async fn answer(state: &AdminState, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if path.starts_with("/limits/") {
        let runtime = state.runtime.load_full();
        let query = request.uri().query();
        if let Some(answer) = limits::answer(&runtime, request.method(), path, query).await {
            return answer;
        }
    }
    match path {
        "/healthz" => text(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => readiness(state),
        "/metrics" => {
            refresh_gauges(state);
            let accept = request.headers().get(header::ACCEPT);
            let format = Exposition::negotiate(accept.and_then(|value| value.to_str().ok()));
            let body = state.metrics.encode_as(format);
            text(StatusCode::OK, format.content_type(), body)
        }
        "/debug/limited" => text(
            StatusCode::OK,
            "application/json",
            most_denied(&state.metrics).to_string(),
        ),
        "/config" => {
            let body = match state.generation.lock() {
                Ok(generation) => generation.config.document.to_string(),
                Err(_) => "{}".into(),
            };
            text(StatusCode::OK, "application/json", body)
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: /healthz /readyz /metrics /config /debug/limited /limits/NAME/state /limits/NAME/reset\n".into(),
        ),
    }
}

/// The most-denied limit identities (hashed) and edge addresses (their `ipv6_prefix` group),
/// most denied first.
fn most_denied(metrics: &Metrics) -> serde_json::Value {
    let limits = metrics.limited.top().into_iter().map(|h| {
        let identity = format!("{:032x}", h.identity);
        (
            h.denied,
            serde_json::json!({ "limit": &*h.limit, "identity": identity, "denied": h.denied }),
        )
    });
    let edge = metrics.edge_limited.top().into_iter().map(|h| {
        let ip = std::net::Ipv6Addr::from(h.identity)
            .to_canonical()
            .to_string();
        (
            h.denied,
            serde_json::json!({ "edge": true, "ip": ip, "denied": h.denied }),
        )
    });
    let mut all: Vec<(u64, serde_json::Value)> = limits.chain(edge).collect();
    all.sort_by_key(|(denied, _)| std::cmp::Reverse(*denied));
    all.into_iter().map(|(_, entry)| entry).collect()
}

/// 200 once serving; with `[store] ready_requires_redis`, only once the store has been
/// reached. Ready once, ready for good: while Redis is away later, or a reload points at
/// another, the limits follow their `on_error` and the gateway can serve (a fleet taken out
/// of its load balancer by one bad reload would be an outage). 503 from the shutdown signal on,
/// so that load balancers stop sending while the requests in flight finish.
fn readiness(state: &AdminState) -> Response<Full<Bytes>> {
    if state.draining.load(Ordering::Acquire) {
        let why = "draining: shutting down, no new connections are accepted\n";
        return text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why.into());
    }
    if state.ready.load(Ordering::Acquire) {
        return text(StatusCode::OK, "text/plain", "ok\n".into());
    }
    let requires_redis = match state.generation.lock() {
        Ok(generation) => generation.config.store.ready_requires_redis,
        Err(_) => false,
    };
    let runtime = state.runtime.load();
    let store = runtime.limiter.stores().redis();
    if requires_redis && store.is_some_and(|redis| !redis.reached()) {
        let why = "waiting for redis: not every worker has connected and loaded the script\n";
        return text(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why.into());
    }
    state.ready.store(true, Ordering::Release);
    text(StatusCode::OK, "text/plain", "ok\n".into())
}

/// Gauges that describe the runtime in force are read when scraped.
fn refresh_gauges(state: &AdminState) {
    let runtime = state.runtime.load();
    // Only the nodes of the store in force (a cluster's masters change with failovers).
    let breakers = &state.metrics.store_breaker_open;
    breakers.clear();
    if let Some(redis) = runtime.limiter.stores().redis() {
        for (node, open) in redis.breakers() {
            let label = NodeLabel {
                node: LabelText::from(&*node),
            };
            breakers.get_or_create(&label).set(i64::from(open));
        }
    }
    let tracked = runtime.edge.as_ref().map_or(0, |edge| edge.tracked());
    state.metrics.edge_tracked_ips.set(tracked as i64);
    for pool in &runtime.upstreams {
        for (index, server) in pool.servers.iter().enumerate() {
            let labels = UpstreamServerLabels {
                upstream: LabelText::from(&*pool.name),
                server: LabelText::from(&*server.label),
            };
            state
                .metrics
                .upstream_healthy
                .get_or_create(&labels)
                .set(i64::from(pool.is_available_now(index)));
        }
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}
