//! What an exchange with an upstream carries: the request head as it goes upstream, its body,
//! and the client-side deadlines of what a pool carries (request bodies, tunnels).

use std::time::Duration;

use http::Method;
use http::uri::PathAndQuery;

use crate::config::ServerConfig;
use crate::http1::request_fields::RequestFields;
use crate::metrics::TimeoutCounters;

pub(crate) use crate::request::canonical::UpstreamBody;

/// A request head as it goes upstream: the client's fields, to which the gateway's own are
/// added as it is written (`SetFields`).
#[derive(Clone, Debug)]
pub(crate) struct UpstreamHead {
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

/// The `[server]` deadlines on the client's side of what a pool carries (its request bodies
/// and upgraded tunnels), and where timeouts are counted.
#[derive(Clone, Default)]
pub(crate) struct ClientDeadlines {
    pub body_read: Duration,
    pub tunnel_idle: Duration,
    pub tunnel_send: Duration,
    pub counters: TimeoutCounters,
    /// The open tunnels (upgraded connections), which outlive the connection task that made
    /// them: the drain waits for them too and counts those it cuts. One for every runtime of
    /// a gateway, across reloads.
    pub tunnels: tokio_util::task::TaskTracker,
}

impl ClientDeadlines {
    pub(crate) fn new(
        server: &ServerConfig,
        counters: TimeoutCounters,
        tunnels: tokio_util::task::TaskTracker,
    ) -> ClientDeadlines {
        ClientDeadlines {
            body_read: server.body_read_timeout,
            tunnel_idle: server.tunnel_idle_timeout,
            tunnel_send: server.tunnel_send_timeout,
            counters,
            tunnels,
        }
    }
}
