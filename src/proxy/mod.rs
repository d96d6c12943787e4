//! The request pipeline of DESIGN.md §1, read top to bottom in `handle`: request id → header
//! size → route → forward → respond. Each step lives in its own module.

mod forward;
pub mod headers;
mod health;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::HOST;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
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
}

impl Runtime {
    pub fn new(config: &Config) -> Runtime {
        Runtime {
            router: Router::new(&config.routes),
            upstreams: config
                .upstreams
                .iter()
                .map(|u| Arc::new(UpstreamPool::new(u)))
                .collect(),
            max_header_bytes: config.server.max_header_bytes,
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
    let host = request_host(&request);
    let route = runtime
        .router
        .find(
            host.as_ref().and_then(|h| h.to_str().ok()),
            request.uri().path(),
            request.method(),
        )
        .ok_or_else(|| GatewayError::NoRoute {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
        })?;
    let forwarded = Forwarded {
        peer: client.peer.ip(),
        proto: client.proto,
        host: host.as_ref(),
        request_id,
    };
    forward::forward(&runtime.upstreams[route.upstream], request, &forwarded).await
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
