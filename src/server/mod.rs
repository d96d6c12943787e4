//! Listeners and the serving lifecycle: bind plain and TLS listeners, accept within
//! `max_connections`, serve each connection, and on shutdown stop accepting and let in-flight
//! requests finish within `shutdown_grace` (see `drain`).
//!
//! Connections are served by `[server] workers` threads, each with its own single-threaded
//! event loop accepting from every listener (as nginx's worker processes do): a connection,
//! its requests and the upstream connections they use stay on one thread, with no wakeups
//! across threads and no work stealing. The calling runtime is worker 0 and also runs the
//! admin listener and the background work (health checks, reloads).

mod accept;
mod accept_errors;
mod admin;
mod announce;
mod connection;
mod drain;
mod http1;
mod reload;
mod served_body;
mod watch;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, ServerConfig, TlsListenerConfig};
use crate::metrics::{Metrics, TimeoutCounters};
use crate::rt::clock::{Clock, SystemClock};
use crate::runtime::Runtime;
use crate::tls::server::{CertResolver, acceptor};
use accept::AcceptLoop;
use admin::AdminState;
use connection::{ConnectionSettings, Protocols};
pub use drain::Drain;
use reload::Generation;
pub use reload::{Reloader, watch_files};
use watch::WatchedDeadlines;

/// Why the gateway could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("cannot start the workers: {0}")]
    Worker(String),
}

/// One bound listener: plain (HTTP/1.1 and h2c) or TLS. Kept as a std socket until serving,
/// so that each worker can register its own copy with its own event loop.
struct Listener {
    socket: std::net::TcpListener,
    tls: Option<Arc<TlsEntry>>,
}

/// What a TLS listener needs for each connection.
struct TlsEntry {
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
    certs: Arc<CertResolver>,
    handshake_failures: AtomicU64,
}

/// A gateway whose listeners are bound, ready to serve.
pub struct Gateway {
    config: Config,
    admin: Option<TcpListener>,
    runtime: Arc<ArcSwap<Runtime>>,
    generation: Arc<Mutex<Generation>>,
    listeners: Vec<Listener>,
    stop: CancellationToken,
}

impl Gateway {
    /// Builds the runtime and binds every listener of `config` (plain ones first).
    pub async fn bind(config: Config) -> Result<Gateway, ServeError> {
        Gateway::bind_with_clock(config, Arc::new(SystemClock::new())).await
    }

    /// As `bind`, with the time every in-process limit, the edge layer and the leases read
    /// (kept across reloads): tests advance a manual clock instead of waiting for a window.
    pub async fn bind_with_clock(
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Gateway, ServeError> {
        let metrics = Arc::new(Metrics::new());
        let runtime = Runtime::build(&config, clock, metrics, None)?;
        let runtime = Arc::new(ArcSwap::from_pointee(runtime));
        let admin = match config.admin {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let mut listeners = Vec::new();
        for &addr in &config.server.listen {
            listeners.push(Listener {
                socket: bind_for_workers(addr).await?,
                tls: None,
            });
        }
        for tls in &config.server.tls {
            listeners.push(Listener {
                socket: bind_for_workers(tls.listen).await?,
                tls: Some(Arc::new(tls_entry(tls)?)),
            });
        }
        let stop = CancellationToken::new();
        let generation = Generation {
            config: config.clone(),
            background: stop.child_token(),
        };
        let generation = Arc::new(Mutex::new(generation));
        Ok(Gateway {
            config,
            admin,
            runtime,
            generation,
            listeners,
            stop,
        })
    }

    /// The bound plain addresses (with real ports when the config asked for port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.addrs(false)
    }

    /// The admin listener's address, when `[admin]` is configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound TLS addresses, in `[[server.tls]]` order.
    pub fn tls_addrs(&self) -> Vec<SocketAddr> {
        self.addrs(true)
    }

    fn addrs(&self, tls: bool) -> Vec<SocketAddr> {
        let listeners = self.listeners.iter().filter(|l| l.tls.is_some() == tls);
        listeners
            .filter_map(|l| l.socket.local_addr().ok())
            .collect()
    }

    /// A handle that re-reads every TLS listener's certificate files, for new connections.
    pub fn certificate_reloader(&self) -> CertificateReloader {
        CertificateReloader(
            self.listeners
                .iter()
                .filter_map(|l| l.tls.as_ref().map(|t| t.certs.clone()))
                .collect(),
        )
    }

    /// A handle that reloads the config from its file (SIGHUP and file changes call it).
    pub fn reloader(&self) -> Reloader {
        Reloader {
            path: PathBuf::from(&self.config.source),
            runtime: self.runtime.clone(),
            generation: self.generation.clone(),
            stop: self.stop.clone(),
            certificates: self.certificate_reloader(),
        }
    }

    /// Serves until `shutdown` completes, then drains within `shutdown_grace` and says how that
    /// ended. Dropping the returned future stops the other workers too.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<Drain, ServeError> {
        for warning in &self.config.warnings {
            tracing::warn!("{}: {warning}", self.config.source);
        }
        let stop = self.stop.clone();
        // Dropped unfinished (its runtime went away), serving still stops everywhere.
        let _stop_when_dropped = stop.clone().drop_guard();
        let background = match self.generation.lock() {
            Ok(generation) => generation.background.clone(),
            Err(_) => stop.child_token(),
        };
        self.runtime.load().start_background(&background);
        // The admin listener outlives `stop`: it answers through the drain, and ends with
        // serving, however serving ends.
        let admin_stop = CancellationToken::new();
        let _admin_stop_when_done = admin_stop.clone().drop_guard();
        let draining = Arc::new(AtomicBool::new(false));
        let listening = announce::Listening {
            proxy: (self.listeners.iter())
                .filter_map(|l| Some((l.socket.local_addr().ok()?, l.tls.is_some())))
                .collect(),
            admin: self.admin_addr(),
        };
        let serving = Serving {
            runtime: self.runtime.clone(),
            settings: Arc::new(connection_settings(
                &self.config.server,
                self.runtime.load().metrics.timeouts.clone(),
            )),
            slots: Arc::new(Semaphore::new(self.config.server.max_connections)),
            connections: TaskTracker::new(),
            stop: stop.clone(),
        };
        let workers = Workers::start(&self.listeners, &serving, self.config.server.workers)?;
        let accepting = serving.accept_on_this_thread(self.listeners)?;
        // Only now: `/readyz` must not say 200 before the data listeners accept.
        if let Some(listener) = self.admin {
            let state = AdminState {
                runtime: self.runtime.clone(),
                generation: self.generation.clone(),
                metrics: self.runtime.load().metrics.clone(),
                ready: Arc::default(),
                draining: draining.clone(),
            };
            let deadline = self.config.server.header_read_timeout;
            tokio::spawn(admin::serve(listener, state, deadline, admin_stop));
        }
        listening.log(&self.config);
        shutdown.await;
        let started = Instant::now();
        draining.store(true, Ordering::Release);
        let grace = self.config.server.shutdown_grace;
        tracing::info!(
            ?grace,
            "shutting down: no new connections; /readyz answers 503"
        );
        stop.cancel();
        let connections = serving.connections;
        let tunnels = self.runtime.load().tunnels.clone();
        let open = (connections, tunnels);
        Ok(drain::drain(accepting, open, grace, workers, started).await)
    }
}

/// Re-reads the certificate files of every TLS listener (SIGHUP and file changes call this).
#[derive(Clone)]
pub struct CertificateReloader(Vec<Arc<CertResolver>>);

impl CertificateReloader {
    /// All or nothing per listener: a listener whose files fail to load keeps its certificates.
    pub fn reload(&self) -> Result<Vec<String>, String> {
        let mut warnings = Vec::new();
        for resolver in &self.0 {
            warnings.extend(resolver.reload()?);
        }
        Ok(warnings)
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// A listener for the workers: bound (with tokio's backlog and SO_REUSEADDR), then detached
/// from this runtime's event loop.
async fn bind_for_workers(addr: SocketAddr) -> Result<std::net::TcpListener, ServeError> {
    bind(addr)
        .await?
        .into_std()
        .map_err(|source| ServeError::Bind { addr, source })
}

/// What every worker shares to accept and serve connections.
#[derive(Clone)]
struct Serving {
    runtime: Arc<ArcSwap<Runtime>>,
    settings: Arc<ConnectionSettings>,
    slots: Arc<Semaphore>,
    connections: TaskTracker,
    stop: CancellationToken,
}

impl Serving {
    /// Starts an accept loop per listener on the calling thread's runtime, and the task that
    /// keeps this worker's connections to the limit store open (`store::warm`).
    fn accept_on_this_thread(
        &self,
        listeners: Vec<Listener>,
    ) -> Result<Vec<tokio::task::JoinHandle<()>>, ServeError> {
        let mut accepting = Vec::new();
        for listener in listeners {
            let addr = listener
                .socket
                .local_addr()
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
            let socket = TcpListener::from_std(listener.socket)
                .map_err(|source| ServeError::Bind { addr, source })?;
            let accept = AcceptLoop {
                socket,
                tls: listener.tls,
                serving: self.clone(),
            };
            accepting.push(tokio::spawn(accept.run()));
        }
        let runtime = self.runtime.clone();
        let current_store = move || runtime.load().limiter.stores().redis().cloned();
        let warm = crate::store::warm::keep_warm(current_store, self.stop.clone());
        accepting.push(tokio::spawn(warm));
        Ok(accepting)
    }
}

/// The worker threads beyond the calling one, each running a single-threaded runtime until
/// `until` is cancelled; dropping `Workers` cancels it.
struct Workers {
    threads: Vec<std::thread::JoinHandle<()>>,
    until: tokio_util::sync::DropGuard,
}

impl Workers {
    fn start(
        listeners: &[Listener],
        serving: &Serving,
        count: usize,
    ) -> Result<Workers, ServeError> {
        let until = CancellationToken::new();
        // Made first: when a later worker cannot start, dropping this stops the earlier ones.
        let mut workers = Workers {
            threads: Vec::new(),
            until: until.clone().drop_guard(),
        };
        for index in 1..count {
            let copies = listeners
                .iter()
                .map(|l| {
                    Ok(Listener {
                        socket: l.socket.try_clone()?,
                        tls: l.tls.clone(),
                    })
                })
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| ServeError::Worker(format!("cannot share a listener: {e}")))?;
            let (serving, until) = (serving.clone(), until.clone());
            let thread = std::thread::Builder::new()
                .name(format!("worker-{index}"))
                .spawn(move || run_worker(index, copies, serving, until))
                .map_err(|e| ServeError::Worker(format!("cannot start worker {index}: {e}")))?;
            workers.threads.push(thread);
        }
        Ok(workers)
    }

    /// Stops the workers (closing what they still serve) and waits for their threads.
    async fn stop(self) {
        drop(self.until);
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
    }
}

fn run_worker(index: usize, listeners: Vec<Listener>, serving: Serving, until: CancellationToken) {
    crate::rt::worker::set(index);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(worker = index, %error, "cannot start the worker's runtime");
            return;
        }
    };
    runtime.block_on(async move {
        if let Err(error) = serving.accept_on_this_thread(listeners) {
            tracing::error!(worker = index, %error, "worker cannot accept");
            return;
        }
        until.cancelled().await;
    });
    // Dropping the runtime closes the connections still open past shutdown_grace.
}

fn tls_entry(config: &TlsListenerConfig) -> Result<TlsEntry, rustls::Error> {
    Ok(TlsEntry {
        acceptor: acceptor(config.certs.clone(), config.min_version)?,
        handshake_timeout: config.handshake_timeout,
        certs: config.certs.clone(),
        handshake_failures: AtomicU64::new(0),
    })
}

fn connection_settings(server: &ServerConfig, counters: TimeoutCounters) -> ConnectionSettings {
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(server.max_header_bytes * 2).unwrap_or(u32::MAX));
    ConnectionSettings {
        http2,
        deadlines: WatchedDeadlines {
            header_read_timeout: server.header_read_timeout,
            idle_timeout: server.idle_timeout,
            send_timeout: server.send_timeout,
            counters,
        },
    }
}
