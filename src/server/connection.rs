//! Serving one client connection and closing it when its watch (`watch`) says so: idle, a
//! request head slower than `header_read_timeout`, a client that takes nothing sent to it for
//! `send_timeout`, or shutdown. HTTP/1.x is served by `http1`; a connection that starts with
//! the HTTP/2 preface goes to hyper's HTTP/2 server.
//!
//! The deadlines are enforced here rather than by hyper, which has no send deadline, for both.

use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use futures_util::FutureExt;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::http1::{self, Close, Watch};
use super::served_body::ServedBody;
use super::watch::{Activity, Answering, IdleWatch, Verdict, WatchedDeadlines};
use crate::proxy::{self, ClientConnection};
use crate::request::canonical::ProxyRequest;
use crate::response::ResponseBody;
use crate::rt::only_when_woken::OnlyWhenWoken;
use crate::runtime::Runtime;

pub(super) struct ConnectionSettings {
    pub http2: http2::Builder<TokioExecutor>,
    pub deadlines: WatchedDeadlines,
}

/// Which protocols a connection may speak.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Protocols {
    /// HTTP/1.x, or HTTP/2 with prior knowledge.
    Any,
    /// HTTP/1.x: TLS chose `http/1.1` by ALPN.
    Http1Only,
}

/// Serves one connection from `(peer, proto, protocols)`; `proto` ("http" or "https") is what
/// X-Forwarded-Proto says. `slot` (of `max_connections`) is held as long as the connection's
/// socket, also by a tunnel it was upgraded to.
pub(super) fn serve<S>(
    (stream, slot): (S, OwnedSemaphorePermit),
    (peer, proto, protocols): (SocketAddr, &'static str, Protocols),
    runtime: Arc<ArcSwap<Runtime>>,
    settings: Arc<ConnectionSettings>,
    stop: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Made here, before the task runs: the task's future then holds each once, where it is
    // used, instead of the arguments and again what was made of them. What one idle
    // connection costs is mostly this future (docs/PERFORMANCE.md, "Idle connections").
    let activity = Arc::new(Activity::new());
    let client = ClientConnection::new(peer, proto);
    let mut connection = http1::Connection::new(WatchedIo {
        stream,
        activity: activity.clone(),
        read_ahead: BytesMut::new(),
        _slot: slot,
    });
    async move {
        // The task wakes once or twice per request for the connection; the shutdown signal
        // and the watch's timer are polled only when one of them woke it (polling each costs
        // instructions on every wake), behind one flag (each flag of its own was a cache miss
        // per wake under load). Measured: docs/PERFORMANCE.md, "Measured behind the code".
        let stopping = pin!(stop.cancelled());
        let watch = IdleWatch::new(&settings.deadlines);
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
            http2_allowed: protocols == Protocols::Any,
            max_header_bytes: runtime.load().max_header_bytes,
        };
        match connection.run(&answerer, &mut guard).await {
            http1::Ended::Closed => {}
            http1::Ended::Upgrade(upgrade) => {
                if !upgrade.send(Box::new(connection.into_io())) {
                    tracing::debug!(peer = %client.peer, "the upgraded connection's tunnel is gone");
                }
            }
            http1::Ended::Http2 => {
                // hyper's HTTP/2 connection is kilobytes of state: allocated for the
                // connections that speak it, not in every connection's task.
                let io = connection.into_io();
                Box::pin(serve_http2(io, runtime, client, &mut guard, &settings)).await;
            }
        }
    }
}

/// Serves a connection that began with the HTTP/2 preface (put back in `io`) with hyper.
async fn serve_http2<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: WatchedIo<S>,
    runtime: Arc<ArcSwap<Runtime>>,
    client: ClientConnection,
    guard: &mut impl Watch,
    settings: &ConnectionSettings,
) {
    let peer = client.peer;
    let service_activity = io.activity.clone();
    let service = service_fn(move |request| {
        // In flight until its response body is done with: that is also when its request body
        // is (the upstream exchange that reads it lives in the response body).
        let answering = Answering::begin(&service_activity, http::Version::HTTP_2);
        // One snapshot per request: a reload never changes a request halfway. `map`, not an
        // `async move` block: a block would hold the request as its capture and again inside
        // `handle`'s future (see `proxy::handle`).
        let request = ProxyRequest::from_hyper(request);
        proxy::handle(runtime.load_full(), client.clone(), request).map(move |response| {
            let response = ResponseBody::with_fields_in_headers(response);
            Ok::<_, Infallible>(response.map(|body| ServedBody::new(body, answering)))
        })
    });
    let connection = (settings.http2).serve_connection(TokioIo::new(io), service);
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
                Close::SendStalled => {
                    tracing::debug!(%peer, "closing: the client took nothing sent to it within send_timeout");
                    return;
                }
            },
        }
    }
}

/// The shutdown signal and the idle and slow-head deadlines of one connection.
struct Guard<'a, S> {
    alarms: OnlyWhenWoken<Alarms<S, Pin<&'a mut tokio::time::Sleep>>>,
    watch: IdleWatch<'a>,
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
                    Verdict::SendStalled => return Poll::Ready(Close::SendStalled),
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

/// The client socket, noting when bytes of a new request head start to arrive and whether
/// writes go through; bytes `http1` read and handed on (to HTTP/2, to a tunnel) come first.
struct WatchedIo<S> {
    stream: S,
    activity: Arc<Activity>,
    read_ahead: BytesMut,
    _slot: OwnedSemaphorePermit,
}

impl<S> WatchedIo<S> {
    fn note_write<T>(&self, result: &Poll<std::io::Result<T>>) {
        match result {
            Poll::Ready(Ok(_)) => self.activity.wrote(),
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(Err(_)) => {}
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> http1::ClientIo for WatchedIo<S> {
    fn put_back(&mut self, read: BytesMut) {
        self.read_ahead = read;
    }
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
        let result = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.note_write(&result);
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.note_write(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // A flush writes what a TLS layer buffered: when it cannot, the client is not reading;
        // when it completes, nothing waits on the client any more. Callers flush only once
        // their writes went through, so a flush is not counted as progress itself.
        let result = Pin::new(&mut self.stream).poll_flush(cx);
        match result {
            Poll::Ready(Ok(())) => self.activity.flushed(),
            Poll::Pending => self.activity.write_blocked(),
            Poll::Ready(Err(_)) => {}
        }
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::Semaphore;

    use super::*;
    use crate::metrics::Metrics;

    /// What a plain connection's future may be, in the debug build tests run in (its size when
    /// this was written, and the release build's whole task: docs/PERFORMANCE.md, "Measured
    /// behind the code"). An idle connection costs mostly its task, so a change that makes it
    /// hold a request's state or hyper's HTTP/2 connection again fails here
    /// (docs/PERFORMANCE.md, "Idle connections").
    const MAX_DEBUG_FUTURE: usize = 1024;

    #[tokio::test]
    async fn a_connections_future_holds_no_request_and_no_http2_state() {
        let config = crate::config::parse_str(
            "[[upstreams]]\nname = \"u\"\nservers = [\"http://127.0.0.1:9\"]\n[[routes]]\nname = \"d\"\nupstream = \"u\"\n",
            "gw.toml",
        )
        .unwrap();
        let metrics = Arc::new(Metrics::new());
        let runtime = Runtime::new(&config, metrics.clone()).unwrap();
        let settings = super::super::connection_settings(&config.server, metrics.timeouts.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, peer) = listener.accept().await.unwrap();
        let slot = Arc::new(Semaphore::new(1)).acquire_owned().await.unwrap();
        let serving = serve(
            (stream, slot),
            (peer, "http", Protocols::Any),
            Arc::new(ArcSwap::from_pointee(runtime)),
            Arc::new(settings),
            CancellationToken::new(),
        );
        let size = std::mem::size_of_val(&serving);
        assert!(size <= MAX_DEBUG_FUTURE, "{size} bytes");
    }
}
