//! One Redis node as the gateway uses it: a pipelined connection per serving worker (see
//! `pipe`) and a circuit breaker of its own, so that on a cluster only the identities whose
//! slots live on a failing node follow their `on_error`, and the others are still decided
//! by Redis.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::breaker::{Breaker, BreakerSettings, Transition};
use super::error::{BREAKER_OPEN_FOR, StoreError};
use super::pipe::{self, Pipe};
use super::script::Batch;

/// The breaker of every node: opens after five failures in a row spanning 100 ms (one failed
/// round trip fails every request merged into it at one instant: a hiccup, not an outage),
/// stays open a second, then lets one request probe.
const BREAKER_FAILURES: u32 = 5;
const BREAKER_MIN_SPAN: Duration = Duration::from_millis(100);

/// A node's connection: its script calls are the limit script's, merged on one node.
pub type NodePipe = Pipe<Batch>;

pub(crate) struct Node {
    /// `host:port`: the `node` label of metrics and logs (never credentials).
    address: Arc<str>,
    settings: pipe::Settings,
    /// One per serving worker (see `crate::rt::worker`): each worker's calls go out on its own
    /// connection, whose driver task runs on that worker's event loop.
    pipes: Box<[OnceLock<NodePipe>]>,
    breaker: Breaker,
}

impl Node {
    /// Connects lazily, on a worker's first call (or its warm-up).
    pub(crate) fn new(settings: pipe::Settings, workers: usize, longest_call: Duration) -> Node {
        let breaker = Breaker::new(BreakerSettings {
            threshold: BREAKER_FAILURES,
            min_span: BREAKER_MIN_SPAN,
            open_for: BREAKER_OPEN_FOR,
            probe_lease: longest_call + settings.connect_timeout,
        });
        Node {
            address: settings.address().into(),
            settings,
            pipes: (0..workers.max(1)).map(|_| OnceLock::new()).collect(),
            breaker,
        }
    }

    pub(crate) fn address(&self) -> &Arc<str> {
        &self.address
    }

    pub(crate) fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// The calling worker's connection to this node.
    pub(crate) fn pipe(&self) -> &NodePipe {
        let cell = &self.pipes[crate::rt::worker::current() % self.pipes.len()];
        cell.get_or_init(|| Pipe::new(self.settings.clone()))
    }

    /// Runs `call` under this node's breaker: refused at once while it is open, and its
    /// outcome settled however it ends. A request that goes away mid-call drops the permit
    /// with it, which gives a probe's slot back (see `breaker::Permit`). An `Ok` is Redis
    /// answering, whatever it answered (a redirection too).
    pub(crate) async fn guarded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let permit = self
            .breaker
            .permit(Instant::now())
            .map_err(|retry_in| StoreError::BreakerOpen { retry_in })?;
        let result = call.await;
        match &result {
            Ok(_) => {
                if permit.succeeded() == Transition::Closed {
                    tracing::info!(
                        node = &*self.address,
                        "limit store node reachable again; its limits are exact again"
                    );
                }
            }
            Err(error) => {
                // Each failure only at debug: an outage would log once per request.
                tracing::debug!(node = &*self.address, %error, "limit store call failed");
                if permit.failed(Instant::now()) == Transition::Opened {
                    tracing::warn!(
                        node = &*self.address,
                        %error,
                        "limit store node failing; circuit breaker open, its limits follow their on_error until a probe succeeds"
                    );
                }
            }
        }
        result
    }
}
