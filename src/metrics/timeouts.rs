//! `rlp_timeouts_total{kind}`: each deadline of docs/operations.md's timeout table that fired,
//! by which. The counters are made once per gateway, so counting is one atomic add.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Which deadline fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// `[server] header_read_timeout`: a request head, or a connection's first request.
    HeaderRead,
    /// `[server] idle_timeout`: a keep-alive connection with nothing in flight.
    Idle,
    /// `[server] body_read_timeout`: a request body the gateway waits on.
    BodyRead,
    /// `[server] send_timeout`: a response the client does not take.
    Send,
    /// `[server] tunnel_idle_timeout`: an upgraded tunnel with no bytes either way.
    TunnelIdle,
    /// `[server] tunnel_send_timeout`: an upgraded tunnel the client does not read.
    TunnelSend,
    /// `[[upstreams]] connect_timeout`.
    UpstreamConnect,
    /// `[[upstreams]] response_timeout`: the upstream's response head.
    UpstreamResponse,
    /// `[[upstreams]] read_timeout`: the upstream's response body once its head came.
    UpstreamRead,
}

impl Deadline {
    const ALL: [Deadline; 9] = [
        Deadline::HeaderRead,
        Deadline::Idle,
        Deadline::BodyRead,
        Deadline::Send,
        Deadline::TunnelIdle,
        Deadline::TunnelSend,
        Deadline::UpstreamConnect,
        Deadline::UpstreamResponse,
        Deadline::UpstreamRead,
    ];

    /// The `kind` label.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Deadline::HeaderRead => "header_read",
            Deadline::Idle => "idle",
            Deadline::BodyRead => "body_read",
            Deadline::Send => "send",
            Deadline::TunnelIdle => "tunnel_idle",
            Deadline::TunnelSend => "tunnel_send",
            Deadline::UpstreamConnect => "upstream_connect",
            Deadline::UpstreamResponse => "upstream_response",
            Deadline::UpstreamRead => "upstream_read",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct KindLabel {
    pub kind: &'static str,
}

/// One counter per deadline; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct TimeoutCounters(Arc<[Counter; Deadline::ALL.len()]>);

impl TimeoutCounters {
    /// The counters of `family`, one series per kind (each present from the start, at 0).
    pub(crate) fn of(family: &Family<KindLabel, Counter>) -> TimeoutCounters {
        let counter = |deadline: Deadline| {
            let label = KindLabel {
                kind: deadline.kind(),
            };
            family.get_or_create(&label).clone()
        };
        TimeoutCounters(Arc::new(Deadline::ALL.map(counter)))
    }

    pub(crate) fn count(&self, deadline: Deadline) {
        self.0[deadline as usize].inc();
    }
}
