//! Keep-alive connections to the servers of one upstream: an idle list per server, reused last
//! in, first out, so a burst's extra connections age out while the warm ones carry the load.
//!
//! A request takes an idle connection that is still open (or makes one) and speaks HTTP/1.1 on
//! it in its own task (`http1`); its response body hands the connection back once read to the
//! end, when the request was sent whole before the response began. A body dropped halfway, a
//! failed exchange, an early answer (the upstream may take the rest of that request for the
//! next one), a response the upstream ended by closing, or a 101 answer does not, and that
//! connection closes. A bodiless idempotent request whose
//! pooled connection turns out to have been closed by the upstream goes again on the next one.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Empty};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

use super::exchange::{UpstreamBody, UpstreamHead};
use super::headers::SetFields;
use super::http1::{
    Connection, ExchangeDeadlines, ExchangeError, Framing, ResponseHead, Stream, Upgraded,
};
use crate::fields::upstream::UpstreamFields;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long an unused keep-alive connection stays pooled.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per server; beyond this the longest idle one is closed.
const MAX_IDLE_PER_SERVER: usize = 1024;

/// Why a request got no response.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made, so nothing was sent.
    Connect(BoxError),
    /// The connection failed while the request was sent or the response head read.
    Exchange(ExchangeError),
    /// No response head (or no connection) by the deadline.
    Timeout,
}

impl From<ExchangeError> for SendError {
    fn from(error: ExchangeError) -> SendError {
        match error {
            ExchangeError::TimedOut => SendError::Timeout,
            error => SendError::Exchange(error),
        }
    }
}

/// The pooled connections of one upstream: an idle list per server and worker.
pub(crate) struct Connections {
    connector: HttpsConnector<HttpConnector>,
    idle: Box<[Arc<IdleList>]>,
    workers: usize,
    /// What every connection's exchanges keep.
    deadlines: ExchangeDeadlines,
    /// `[[upstreams]] reuse_after_body`: false closes every connection that carried a request
    /// body, for upstreams that may answer without reading one.
    pub reuse_after_body: bool,
}

/// One server's idle connections, the most recently used last.
#[derive(Default)]
struct IdleList(Mutex<VecDeque<Idle>>);

struct Idle {
    connection: Box<Connection>,
    since: Instant,
}

impl Connections {
    pub(crate) fn new(
        connector: HttpsConnector<HttpConnector>,
        servers: usize,
        workers: usize,
        deadlines: ExchangeDeadlines,
    ) -> Connections {
        let workers = workers.max(1);
        Connections {
            connector,
            idle: (0..servers * workers).map(|_| Arc::default()).collect(),
            workers,
            deadlines,
            reuse_after_body: true,
        }
    }

    /// The calling worker's idle list for `server`.
    fn idle_list(&self, server: usize) -> &Arc<IdleList> {
        let worker = crate::rt::worker::current() % self.workers;
        &self.idle[server * self.workers + worker]
    }

    /// Sends a request with `head` (Host set) and `body` to server `server`, reached at
    /// `address` (scheme and authority), and reads the response head, all by `deadline`. On
    /// the most recent idle connection if there is one, and when the upstream closes that one
    /// before answering, once more on a new connection if `may_resend` and the request may be
    /// sent twice.
    // An `async move` block, not an `async fn`: see `proxy::handle`.
    pub(crate) fn send(
        &self,
        server: usize,
        address: &Uri,
        (head, mut body): (UpstreamHead, UpstreamBody),
        set: SetFields,
        deadline: tokio::time::Instant,
        may_resend: bool,
    ) -> impl Future<Output = Result<Response<PooledBody>, SendError>> {
        let pool = self.idle_list(server);
        let replayable = may_resend && may_send_again(&head.method, &body, set.upgrade.is_some());
        let reusable = self.reuse_after_body || body.is_end_stream();
        let idle = reusable.then_some(pool);
        async move {
            if let Some(mut connection) = pool.take_open() {
                match connection.exchange(&head, &set, body, deadline).await {
                    Ok(answer) => return Ok(pooled(answer, connection, idle)),
                    // Most likely the upstream closed it while idle and never saw the request.
                    // But an upstream that closes connections on the requests it fails to
                    // answer (a worker killed by its timeout) did see it: so it is sent once
                    // more, on a new connection, never down the other idle ones, each of
                    // which would run it again.
                    Err(error) if replayable && error.is_close_before_answer() => {
                        tracing::debug!(%error, "pooled upstream connection was closed; sending again on a new one");
                        body = Either::Right(Empty::new());
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            // Boxed: the connector's future is large and only needed for new connections, so
            // every request's future stays small (futures are moved, byte by byte, as they go).
            let connecting = tokio::time::timeout_at(deadline, Box::pin(self.connect(address)));
            let mut connection = connecting.await.map_err(|_| SendError::Timeout)??;
            let answer = connection.exchange(&head, &set, body, deadline).await?;
            Ok(pooled(answer, connection, idle))
        }
    }

    /// Opens a connection: TCP within the connect timeout, then TLS for `https://`.
    async fn connect(&self, address: &Uri) -> Result<Box<Connection>, SendError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let stream = match connector
            .call(address.clone())
            .await
            .map_err(SendError::Connect)?
        {
            MaybeHttpsStream::Http(tcp) => Stream::Plain(tcp.into_inner()),
            MaybeHttpsStream::Https(tls) => Stream::Tls(Box::new(tls.into_inner())),
        };
        // Boxed once for its life: requests and bodies then move a pointer, not the buffers.
        Ok(Box::new(Connection::new(stream, self.deadlines.clone())))
    }

    /// Shares the idle lists of `previous`'s server `at` as those of `server`: a reload's pool
    /// goes on with the warm connections of the one before, and the old runtime's last
    /// responses give theirs back where the new one finds them. Both must have as many workers.
    pub(crate) fn adopt_idle(&mut self, server: usize, previous: &Connections, at: usize) {
        if self.workers != previous.workers {
            return;
        }
        let lists = &previous.idle[at * self.workers..(at + 1) * self.workers];
        self.idle[server * self.workers..(server + 1) * self.workers].clone_from_slice(lists);
    }

    /// Closes the connections idle for longer than `IDLE_TIMEOUT`.
    pub(crate) fn close_expired(&self, now: Instant) {
        for list in self.idle.iter() {
            list.lock().retain(|idle| !idle.expired(now));
        }
    }

    #[cfg(test)]
    /// Idle connections to `server`, of all workers.
    pub(crate) fn idle_count(&self, server: usize) -> usize {
        let lists = &self.idle[server * self.workers..(server + 1) * self.workers];
        lists.iter().map(|list| list.lock().len()).sum()
    }
}

/// True for a request that may be sent a second time when the first attempt's fate is unknown
/// (its connection refused, or closed under it before any answer): idempotent (RFC 9110
/// §9.2.2), no upgrade, and no body, since a streamed body cannot be sent twice.
pub(crate) fn may_send_again(method: &Method, body: &impl Body, upgrade: bool) -> bool {
    let idempotent = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    );
    idempotent && !upgrade && body.is_end_stream()
}

impl Idle {
    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) >= IDLE_TIMEOUT
    }
}

impl IdleList {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Idle>> {
        // The list holds no invariant a panicking holder could break.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The most recently used connection that is still open.
    fn take_open(&self) -> Option<Box<Connection>> {
        loop {
            let mut connection = self.lock().pop_back()?.connection;
            if connection.is_open() {
                return Some(connection);
            }
        }
    }

    fn push(&self, mut connection: Box<Connection>) {
        connection.release_buffers();
        let now = Instant::now();
        let mut idle = self.lock();
        while idle
            .front()
            .is_some_and(|oldest| oldest.expired(now) || idle.len() >= MAX_IDLE_PER_SERVER)
        {
            idle.pop_front();
        }
        idle.push_back(Idle {
            connection,
            since: now,
        });
    }
}

/// Wraps a response so that its connection returns to the pool after the body; a response
/// without a body gives it back at once.
/// `idle` is `None` when the connection must not be reused whatever the answer.
fn pooled(
    head: ResponseHead,
    connection: Box<Connection>,
    idle: Option<&Arc<IdleList>>,
) -> Response<PooledBody> {
    let ResponseHead {
        response,
        fields,
        framing,
        keep_alive,
    } = head;
    let mut body = PooledBody {
        connection: Some(connection),
        fields,
        framing,
        idle: idle.filter(|_| keep_alive).cloned(),
    };
    if body.framing == Framing::Done {
        body.finish();
    }
    response.map(|()| body)
}

/// An upstream response body that gives its connection back once read to the end.
pub(crate) struct PooledBody {
    connection: Option<Box<Connection>>,
    /// The response's fields, which its head's header map does not hold.
    fields: UpstreamFields,
    framing: Framing,
    /// Where the connection goes after the body; `None` when it must close.
    idle: Option<Arc<IdleList>>,
}

impl PooledBody {
    pub(crate) fn fields(&self) -> &UpstreamFields {
        &self.fields
    }

    pub(crate) fn fields_mut(&mut self) -> &mut UpstreamFields {
        &mut self.fields
    }

    /// The connection of a 101 answer, for the tunnel.
    pub(crate) fn take_upgraded(&mut self) -> Option<Upgraded> {
        if self.framing != Framing::Upgraded {
            return None;
        }
        self.connection
            .take()
            .map(|connection| connection.into_upgraded())
    }

    /// Pools the connection after a clean exchange; closes it otherwise. A request still
    /// being sent is not finished first: an upstream that answered before reading it may take
    /// its rest for a request of its own, and the next client's request behind it would be
    /// that request's body (and get its answer).
    fn finish(&mut self) {
        let (Some(connection), Some(idle)) = (self.connection.take(), self.idle.take()) else {
            return;
        };
        if connection.is_idle() {
            idle.push(connection);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = ExchangeError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        let this = self.get_mut();
        let Some(connection) = this.connection.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(connection.poll_frame(&mut this.framing, cx));
        match &frame {
            // A broken body leaves its connection unusable.
            Some(Err(_)) => this.connection = None,
            _ if this.framing == Framing::Done => this.finish(),
            _ => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.framing, Framing::Done | Framing::Upgraded)
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(left) => SizeHint::with_exact(left),
            Framing::Done | Framing::Upgraded => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests;
