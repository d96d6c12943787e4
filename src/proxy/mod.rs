//! The request pipeline of DESIGN.md §1, read top to bottom in `proxy`: request id → header
//! size → client ip → route → ip lists and edge → forward → respond. Each step lives in its
//! own module; refusals come back as values and `respond` turns them into answers.

mod forward;
pub mod headers;
mod health;
pub mod upstream;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::HOST;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;

use crate::client_ip::ClientIpPolicy;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::edge::{EdgeLayer, EdgeVerdict};
use crate::request_id::{self, X_REQUEST_ID};
use crate::respond::{self, GatewayError, ResponseBody};
use crate::route::Router;
use headers::Forwarded;
use upstream::UpstreamPool;

/// Everything a request needs, built once from a validated config.
pub struct Runtime {
    pub router: Router,
    pub upstreams: Vec<Arc<UpstreamPool>>,
    pub max_header_bytes: usize,
    pub client_ip: ClientIpPolicy,
    pub edge: Option<EdgeLayer>,
    pub clock: Arc<dyn Clock>,
}

impl Runtime {
    pub fn new(config: &Config) -> Runtime {
        Runtime::with_clock(config, Arc::new(SystemClock::new()))
    }

    pub fn with_clock(config: &Config, clock: Arc<dyn Clock>) -> Runtime {
        let upstreams = config
            .upstreams
            .iter()
            .map(|u| Arc::new(UpstreamPool::new(u)));
        Runtime {
            router: Router::new(&config.routes),
            upstreams: upstreams.collect(),
            max_header_bytes: config.server.max_header_bytes,
            client_ip: config.client_ip.clone(),
            edge: config.edge.clone().map(EdgeLayer::new),
            clock,
        }
    }

    /// Starts the background work of this runtime (health checks) until `stop`.
    pub fn start_background(&self, stop: &CancellationToken) {
        health::spawn_checkers(&self.upstreams, stop);
    }
}

/// The client side of a connection, as the pipeline sees it.
#[derive(Debug, Clone, Copy)]
pub struct ClientConnection {
    pub peer: SocketAddr,
    /// `"http"` or `"https"`, for X-Forwarded-Proto.
    pub proto: &'static str,
}

/// Answers one request. Never fails: errors become problem+json answers here.
pub async fn handle(
    runtime: &Runtime,
    client: ClientConnection,
    request: Request<Incoming>,
) -> Response<ResponseBody> {
    let request_id = request_id::keep_or_mint(request.headers());
    let mut response = match proxy(runtime, client, request, &request_id).await {
        Ok(response) => response,
        Err(error) => respond::error_response(&error, &request_id),
    };
    response.headers_mut().insert(X_REQUEST_ID, request_id);
    response
}

async fn proxy(
    runtime: &Runtime,
    client: ClientConnection,
    request: Request<Incoming>,
    request_id: &HeaderValue,
) -> Result<Response<ResponseBody>, GatewayError> {
    check_header_size(&request, runtime.max_header_bytes)?;
    let client_ip = runtime
        .client_ip
        .resolve(client.peer.ip(), request.headers());
    let host = request_host(&request);
    let host_name = host.as_ref().and_then(|h| h.to_str().ok());
    let route = runtime
        .router
        .find(host_name, request.uri().path(), request.method())
        .ok_or_else(|| GatewayError::NoRoute {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
        })?;
    if let Some(refusal) = edge_refusal(runtime, client_ip.ip, request_id) {
        return Ok(refusal);
    }
    let forwarded = Forwarded {
        peer: client.peer.ip(),
        peer_trusted: client_ip.peer_trusted,
        proto: client.proto,
        host: host.as_ref(),
        request_id,
    };
    forward::forward(&runtime.upstreams[route.upstream], request, &forwarded).await
}

/// The answer when the edge layer refuses the client: 403 for a deny list, 429 over the rate.
fn edge_refusal(
    runtime: &Runtime,
    client_ip: IpAddr,
    request_id: &HeaderValue,
) -> Option<Response<ResponseBody>> {
    let edge = runtime.edge.as_ref()?;
    match edge.check(runtime.client_ip.group(client_ip), runtime.clock.now()) {
        EdgeVerdict::Allow | EdgeVerdict::Exempt => None,
        EdgeVerdict::Forbidden { list } => {
            tracing::debug!(%client_ip, list, "refused: on a deny list");
            Some(respond::forbidden(request_id))
        }
        EdgeVerdict::Limited {
            status,
            retry_after,
        } => Some(respond::rate_limited(&status, retry_after, request_id)),
    }
}

/// The Host header, or the HTTP/2 `:authority`.
fn request_host(request: &Request<Incoming>) -> Option<HeaderValue> {
    match request.headers().get(HOST) {
        Some(host) => Some(host.clone()),
        None => request
            .uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok()),
    }
}

/// Enforces `max_header_bytes` on the request line and headers together. hyper's own buffer
/// limit (set larger) stops anything far beyond it before it is parsed.
fn check_header_size(request: &Request<Incoming>, limit: usize) -> Result<(), GatewayError> {
    let line = request.method().as_str().len()
        + request
            .uri()
            .path_and_query()
            .map_or(1, |p| p.as_str().len())
        + 12;
    let fields: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if line + fields > limit {
        return Err(GatewayError::HeadersTooLarge { limit });
    }
    Ok(())
}
