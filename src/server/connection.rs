//! Serving one client connection (HTTP/1.1 or h2c, detected by hyper-util's auto builder) and
//! closing it when it is idle, when it never sends a request, or on shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::proxy::{self, ClientConnection, Runtime};

pub struct ConnectionSettings {
    pub builder: auto::Builder<TokioExecutor>,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

/// What the idle watch needs to know about a connection's requests.
#[derive(Default)]
struct Activity {
    started: AtomicU64,
    in_flight: AtomicUsize,
}

/// A request being answered; released on drop, also when the client goes away.
struct Answering(Arc<Activity>);

impl Answering {
    fn begin(activity: &Arc<Activity>) -> Answering {
        activity.started.fetch_add(1, Ordering::Relaxed);
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        Answering(activity.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

pub async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    runtime: Arc<Runtime>,
    settings: Arc<ConnectionSettings>,
    stop: CancellationToken,
) {
    let activity = Arc::new(Activity::default());
    let client = ClientConnection {
        peer,
        proto: "http",
    };
    let service_activity = activity.clone();
    let service = service_fn(move |request| {
        let runtime = runtime.clone();
        let answering = Answering::begin(&service_activity);
        async move {
            let response = proxy::handle(&runtime, client, request).await;
            drop(answering);
            Ok::<_, Infallible>(response)
        }
    });
    let connection = settings
        .builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);

    let mut watch = IdleWatch::new(&settings);
    let mut draining = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
                return;
            }
            _ = stop.cancelled(), if !draining => {
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(watch.next_check), if !draining => match watch.check(&activity) {
                Verdict::Keep => {}
                Verdict::Idle => {
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
                Verdict::NoRequest => {
                    tracing::debug!(%peer, "closing: no request within header_read_timeout");
                    return;
                }
            },
        }
    }
}

enum Verdict {
    Keep,
    Idle,
    NoRequest,
}

/// Checks a connection a few times per `idle_timeout`, so an idle one closes within 1.25×
/// of it, without a timer reset per request. hyper enforces `header_read_timeout` inside an
/// HTTP/1 request head; this covers the wait for the very first bytes (and h2c prefaces).
struct IdleWatch {
    next_check: Instant,
    period: Duration,
    idle_timeout: Duration,
    seen_started: u64,
    quiet_since: Instant,
}

impl IdleWatch {
    fn new(settings: &ConnectionSettings) -> IdleWatch {
        let now = Instant::now();
        IdleWatch {
            next_check: now + settings.header_read_timeout,
            period: (settings.idle_timeout / 4).max(Duration::from_millis(10)),
            idle_timeout: settings.idle_timeout,
            seen_started: 0,
            quiet_since: now,
        }
    }

    fn check(&mut self, activity: &Activity) -> Verdict {
        let now = Instant::now();
        let started = activity.started.load(Ordering::Relaxed);
        if started == 0 {
            return Verdict::NoRequest;
        }
        self.next_check = now + self.period;
        if started != self.seen_started || activity.in_flight.load(Ordering::Relaxed) > 0 {
            self.seen_started = started;
            self.quiet_since = now;
            return Verdict::Keep;
        }
        if now.duration_since(self.quiet_since) >= self.idle_timeout {
            Verdict::Idle
        } else {
            Verdict::Keep
        }
    }
}
