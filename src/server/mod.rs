//! Listeners and the serving lifecycle: bind, accept within `max_connections`, serve each
//! connection, and on shutdown stop accepting and let in-flight requests finish within
//! `shutdown_grace`.

mod connection;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ServerConfig};
use crate::proxy::Runtime;
use connection::ConnectionSettings;

/// Why the gateway could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A gateway whose listeners are bound, ready to serve.
pub struct Gateway {
    config: Config,
    listeners: Vec<TcpListener>,
}

impl Gateway {
    /// Binds every listener of `config`; fails on the first address that cannot be bound.
    pub async fn bind(config: Config) -> Result<Gateway, ServeError> {
        let mut listeners = Vec::with_capacity(config.server.listen.len());
        for &addr in &config.server.listen {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind { addr, source })?;
            listeners.push(listener);
        }
        Ok(Gateway { config, listeners })
    }

    /// The bound addresses (with the real ports when the config asked for port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serves until `shutdown` completes, then drains within `shutdown_grace`.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let runtime = Arc::new(Runtime::new(&self.config));
        let stop = CancellationToken::new();
        runtime.start_background(&stop);
        let settings = Arc::new(connection_settings(&self.config.server));
        let connections = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(self.config.server.max_connections));
        let accepting: Vec<_> = self
            .listeners
            .into_iter()
            .map(|listener| {
                let accept = AcceptLoop {
                    listener,
                    runtime: runtime.clone(),
                    settings: settings.clone(),
                    slots: slots.clone(),
                    connections: connections.clone(),
                    stop: stop.clone(),
                };
                tokio::spawn(accept.run())
            })
            .collect();
        for addr in &self.config.server.listen {
            tracing::info!(%addr, "listening");
        }
        shutdown.await;
        tracing::info!(grace = ?self.config.server.shutdown_grace, "shutting down: no new connections");
        stop.cancel();
        for task in accepting {
            let _ = task.await;
        }
        connections.close();
        if tokio::time::timeout(self.config.server.shutdown_grace, connections.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                open = connections.len(),
                "shutdown_grace over; closing remaining connections"
            );
        }
        Ok(())
    }
}

fn connection_settings(server: &ServerConfig) -> ConnectionSettings {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // `connection` enforces header_read_timeout; hyper's timer would also cut idle
        // keep-alive connections (see connection.rs).
        .header_read_timeout(None)
        .keep_alive(true)
        // Leave room above max_header_bytes so `proxy` can answer 431 as problem+json; hyper
        // answers a bare 431 for anything beyond.
        .max_buf_size(server.max_header_bytes * 2 + 8192);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(server.max_header_bytes * 2).unwrap_or(u32::MAX));
    ConnectionSettings {
        builder,
        header_read_timeout: server.header_read_timeout,
        idle_timeout: server.idle_timeout,
    }
}

struct AcceptLoop {
    listener: TcpListener,
    runtime: Arc<Runtime>,
    settings: Arc<ConnectionSettings>,
    slots: Arc<Semaphore>,
    connections: TaskTracker,
    stop: CancellationToken,
}

impl AcceptLoop {
    /// Accepts until `stop`. At `max_connections` it stops accepting, so newcomers wait in the
    /// kernel's backlog instead of costing memory here.
    async fn run(self) {
        loop {
            let slot = tokio::select! {
                _ = self.stop.cancelled() => return,
                slot = self.slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return,
                },
            };
            let accepted = tokio::select! {
                _ = self.stop.cancelled() => return,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let serve = connection::serve(
                        stream,
                        peer,
                        self.runtime.clone(),
                        self.settings.clone(),
                        self.stop.clone(),
                    );
                    self.connections.spawn(async move {
                        serve.await;
                        drop(slot);
                    });
                }
                Err(error) => accept_failed(error).await,
            }
        }
    }
}

/// Out of file descriptors or memory: wait a moment instead of spinning.
async fn accept_failed(error: std::io::Error) {
    tracing::warn!(%error, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}
