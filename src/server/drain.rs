//! Graceful shutdown: the accept loops have stopped; the connections in flight get
//! `shutdown_grace` to finish, then the workers stop with whatever is left. Meanwhile the admin
//! listener keeps answering (`/readyz` says draining), so a load balancer takes the instance
//! out instead of seeing it vanish; it stops only once the drain is over.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use super::Workers;

/// How a drain ended: what the process's last log line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drain {
    /// From the shutdown signal to the end of serving.
    pub took: Duration,
    /// Connections and tunnels closed unfinished when `shutdown_grace` ran out; 0 when every
    /// one finished.
    pub cut: usize,
}

impl Drain {
    /// `"connections drained"` or `"shutdown_grace over"`.
    pub fn ended(&self) -> &'static str {
        if self.cut == 0 {
            "connections drained"
        } else {
            "shutdown_grace over"
        }
    }
}

/// Waits for the accept loops to end, then for `connections` and the `tunnels` they opened
/// within `grace`, and stops the workers; `started` is when the shutdown signal came.
pub(super) async fn drain(
    accepting: Vec<JoinHandle<()>>,
    (connections, tunnels): (TaskTracker, TaskTracker),
    grace: Duration,
    workers: Workers,
    started: Instant,
) -> Drain {
    for task in accepting {
        let _ = task.await;
    }
    connections.close();
    let mut cut = 0;
    let finished = async {
        connections.wait().await;
        // No connection is left to open another tunnel.
        tunnels.close();
        tunnels.wait().await;
    };
    if tokio::time::timeout(grace, finished).await.is_err() {
        cut = connections.len() + tunnels.len();
        tracing::warn!(
            open = cut,
            connections = connections.len(),
            tunnels = tunnels.len(),
            "shutdown_grace over; closing remaining connections"
        );
    }
    workers.stop().await;
    Drain {
        took: started.elapsed(),
        cut,
    }
}
