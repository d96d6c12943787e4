//! Serving one client connection and closing it when it is idle, when a request head takes
//! longer than `header_read_timeout`, or on shutdown. Plain HTTP/1.1 requests are served by
//! `http1` until one needs hyper; from then on hyper serves the connection (HTTP/1.1, or h2c
//! detected by hyper-util's auto builder).
//!
//! Both deadlines are enforced here rather than by hyper: hyper's HTTP/1 header timer also runs
//! while a keep-alive connection waits for its next request, which would make
//! `header_read_timeout` override `idle_timeout`.

use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::BytesMut;
use futures_util::FutureExt;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::http1::{self, Close, Watch};
use super::hyper_conn::HyperServers;
use super::only_when_woken::OnlyWhenWoken;
use crate::proxy::request::ProxyRequest;
use crate::proxy::{self, ClientConnection, Runtime};
use crate::respond::ResponseBody;

pub struct ConnectionSettings {
    pub hyper: HyperServers,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

/// What the watch needs to know about a connection's requests.
pub(super) struct Activity {
    opened: Instant,
    started: AtomicU64,
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` (plus one) when bytes of a request head began to arrive on
    /// an idle HTTP/1 connection; 0 when no head is pending.
    head_since_ms: AtomicU64,
    /// HTTP/2 interleaves frames of many streams, so a pending head cannot be told apart.
    multiplexed: AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            started: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            head_since_ms: AtomicU64::new(0),
            multiplexed: AtomicBool::new(false),
        }
    }

    fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_since_ms.load(Ordering::Relaxed) == 0
            && !self.multiplexed.load(Ordering::Relaxed)
        {
            let since = self.opened.elapsed().as_millis() as u64 + 1;
            self.head_since_ms.store(since, Ordering::Relaxed);
        }
    }

    /// How long a request head has been arriving, if one is pending.
    fn pending_head_for(&self, now: Instant) -> Option<Duration> {
        match self.head_since_ms.load(Ordering::Relaxed) {
            0 => None,
            since => Some(
                now.duration_since(self.opened)
                    .saturating_sub(Duration::from_millis(since - 1)),
            ),
        }
    }
}

/// A request being answered; released on drop, also when the client goes away.
pub(super) struct Answering(Arc<Activity>);

impl Answering {
    pub(super) fn begin(activity: &Arc<Activity>, version: http::Version) -> Answering {
        if version == http::Version::HTTP_2 {
            activity.multiplexed.store(true, Ordering::Relaxed);
        }
        activity.head_since_ms.store(0, Ordering::Relaxed);
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

/// Which protocols a connection may speak.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Protocols {
    /// HTTP/1.x, or HTTP/2 with prior knowledge.
    Any,
    /// HTTP/1.x: TLS chose `http/1.1` by ALPN.
    Http1Only,
}

/// Serves one connection from `(peer, proto, protocols)`; `proto` ("http" or "https") is what
/// X-Forwarded-Proto says.
pub async fn serve<S>(
    stream: S,
    (peer, proto, protocols): (SocketAddr, &'static str, Protocols),
    runtime: Arc<ArcSwap<Runtime>>,
    settings: Arc<ConnectionSettings>,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let client = ClientConnection::new(peer, proto);
    let io = WatchedIo {
        stream,
        activity: activity.clone(),
        read_ahead: BytesMut::new(),
    };
    // The task wakes once or twice per request for the connection; the shutdown signal and the
    // watch's timer are polled only when one of them woke it (each cost ~200 instructions to
    // poll), behind one flag (each flag of its own was a cache miss per wake under load).
    let stopping = pin!(stop.cancelled());
    let watch = IdleWatch::new(&settings);
    let checking = pin!(tokio::time::sleep_until(watch.next_check));
    let mut guard = Guard {
        alarms: OnlyWhenWoken::new(Alarms { stopping, checking }),
        watch,
        activity: &activity,
    };
    let answerer = http1::Answerer {
        runtime: &runtime,
        client: &client,
        activity: &activity,
    };
    let (io, at_start) = match http1::serve(io, &answerer, &mut guard).await {
        http1::Ended::Closed => return,
        http1::Ended::ToHyper {
            io: mut handed,
            read,
            at_start,
        } => {
            handed.read_ahead = read;
            (handed, at_start)
        }
    };
    let http2_allowed = protocols == Protocols::Any && at_start;

    let service_activity = activity.clone();
    let service = service_fn(move |request| {
        let answering = Answering::begin(&service_activity, request.version());
        // One snapshot per request: a reload never changes a request halfway. `map`, not an
        // `async move` block: a block would hold the request as its capture and again inside
        // `handle`'s future (see `proxy::handle`).
        let request = ProxyRequest::from_hyper(request);
        proxy::handle(runtime.load_full(), client.clone(), request).map(move |response| {
            drop(answering);
            Ok::<_, Infallible>(ResponseBody::with_fields_in_headers(response))
        })
    });
    let connection = (settings.hyper).serve(TokioIo::new(io), service, http2_allowed);
    tokio::pin!(connection);
    let mut draining = false;
    loop {
        tokio::select! {
            biased;
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
                return;
            }
            close = poll_fn(|cx| guard.poll_close(cx)), if !draining => match close {
                Close::Stop | Close::Idle => {
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
                Close::SlowHead => {
                    tracing::debug!(%peer, "closing: request head not complete within header_read_timeout");
                    return;
                }
            },
        }
    }
}

/// The shutdown signal and the idle and slow-head deadlines of one connection.
struct Guard<'a, S> {
    alarms: OnlyWhenWoken<Alarms<S, Pin<&'a mut tokio::time::Sleep>>>,
    watch: IdleWatch,
    activity: &'a Activity,
}

impl<S: Future + Unpin> http1::Watch for Guard<'_, S> {
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Close> {
        loop {
            match ready!(Pin::new(&mut self.alarms).poll(cx)) {
                Alarm::Stop => return Poll::Ready(Close::Stop),
                Alarm::Check => match self.watch.check(self.activity) {
                    Verdict::Keep => {
                        let next = self.watch.next_check;
                        self.alarms.change().checking.as_mut().reset(next);
                    }
                    Verdict::Idle => return Poll::Ready(Close::Idle),
                    Verdict::SlowHead => return Poll::Ready(Close::SlowHead),
                },
            }
        }
    }
}

/// What woke the watch of a connection.
enum Alarm {
    Stop,
    Check,
}

/// The shutdown signal and the watch's timer, as one future.
struct Alarms<S, C> {
    stopping: S,
    checking: C,
}

impl<S: Future + Unpin, C: Future + Unpin> Future for Alarms<S, C> {
    type Output = Alarm;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Alarm> {
        if Pin::new(&mut self.stopping).poll(cx).is_ready() {
            return Poll::Ready(Alarm::Stop);
        }
        match Pin::new(&mut self.checking).poll(cx) {
            Poll::Ready(_) => Poll::Ready(Alarm::Check),
            Poll::Pending => Poll::Pending,
        }
    }
}

enum Verdict {
    Keep,
    Idle,
    SlowHead,
}

/// Checks a connection a few times per deadline, so an idle connection closes within 1.25×
/// `idle_timeout` and a slow head within 1.25× `header_read_timeout`, without a timer reset
/// per request.
struct IdleWatch {
    next_check: Instant,
    period: Duration,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    seen_started: u64,
    quiet_since: Instant,
}

impl IdleWatch {
    fn new(settings: &ConnectionSettings) -> IdleWatch {
        let now = Instant::now();
        let shortest = settings.idle_timeout.min(settings.header_read_timeout);
        let period = (shortest / 4).max(Duration::from_millis(10));
        IdleWatch {
            next_check: now + period,
            period,
            header_read_timeout: settings.header_read_timeout,
            idle_timeout: settings.idle_timeout,
            seen_started: 0,
            quiet_since: now,
        }
    }

    fn check(&mut self, activity: &Activity) -> Verdict {
        let now = Instant::now();
        self.next_check = now + self.period;
        let started = activity.started.load(Ordering::Relaxed);
        let never_asked =
            started == 0 && now.duration_since(activity.opened) >= self.header_read_timeout;
        let head_too_slow = activity
            .pending_head_for(now)
            .is_some_and(|d| d >= self.header_read_timeout);
        if never_asked || head_too_slow {
            return Verdict::SlowHead;
        }
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

/// The client socket, noting when bytes of a new request head start to arrive; for hyper,
/// the bytes `http1` read and did not serve come first.
struct WatchedIo<S> {
    stream: S,
    activity: Arc<Activity>,
    read_ahead: BytesMut,
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.read_ahead.is_empty() {
            let n = self.read_ahead.len().min(buf.remaining());
            buf.put_slice(&self.read_ahead.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_arrived();
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
