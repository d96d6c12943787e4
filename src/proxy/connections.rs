//! Keep-alive connections to the servers of one upstream: an idle list per server, reused last
//! in, first out, so a burst's extra connections age out while the warm ones carry the load.
//!
//! A request takes an idle connection (or makes one), and its response body hands the
//! connection back when it has been read to the end; a body dropped halfway, a failed exchange
//! or a 101 answer does not, and hyper closes that connection. This replaces hyper-util's
//! legacy client, whose pool hashed its key three times and went through a checkout future per
//! request (about a fifth of the instructions of a proxied request, see docs/PERFORMANCE.md).

use std::cell::Cell;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower_service::Service;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::upstream::{UpstreamBody, UpstreamPool};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long an unused keep-alive connection stays pooled.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per server; beyond this the longest idle one is closed.
const MAX_IDLE_PER_SERVER: usize = 1024;

type Sender = SendRequest<UpstreamBody>;

/// Why a request got no response.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be made, so nothing was sent.
    Connect(BoxError),
    /// The connection failed while the request was sent or the response head read.
    Exchange(hyper::Error),
}

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as serving worker `index` (see `server`): its requests take and
/// give back connections of their own idle lists, so a connection's task runs on the thread
/// whose requests use it and no exchange crosses threads.
pub fn set_worker(index: usize) {
    WORKER.with(|worker| worker.set(index));
}

/// The pooled connections of one upstream: an idle list per server and worker.
pub struct Connections {
    connector: HttpsConnector<HttpConnector>,
    idle: Box<[Arc<IdleList>]>,
    workers: usize,
}

/// One server's idle connections, the most recently used last.
#[derive(Default)]
struct IdleList(Mutex<VecDeque<Idle>>);

struct Idle {
    sender: Sender,
    since: Instant,
}

impl Connections {
    pub fn new(
        connector: HttpsConnector<HttpConnector>,
        servers: usize,
        workers: usize,
    ) -> Connections {
        let workers = workers.max(1);
        Connections {
            connector,
            idle: (0..servers * workers).map(|_| Arc::default()).collect(),
            workers,
        }
    }

    /// The calling worker's idle list for `server`.
    fn idle_list(&self, server: usize) -> &Arc<IdleList> {
        let worker = WORKER.with(Cell::get) % self.workers;
        &self.idle[server * self.workers + worker]
    }

    /// Sends `request` (origin-form target, Host set) to server `server`, reached at `address`
    /// (scheme and authority). A pooled connection that closed while idle is skipped, and the
    /// request, not yet sent, goes on the next one or a new one.
    pub async fn send(
        &self,
        server: usize,
        address: &Uri,
        mut request: Request<UpstreamBody>,
    ) -> Result<Response<PooledBody>, SendError> {
        let idle = self.idle_list(server);
        while let Some(mut sender) = idle.take_ready() {
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(pooled(response, sender, idle)),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(SendError::Exchange(failed.into_error())),
                },
            }
        }
        // Boxed: the connector's future is large and only needed for new connections, so
        // every request's future stays small (futures are moved, byte by byte, as they go).
        let mut sender = Box::pin(self.connect(address)).await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(SendError::Exchange)?;
        Ok(pooled(response, sender, idle))
    }

    /// Opens a connection (TCP within the connect timeout, then TLS for `https://`) and
    /// starts the task that drives it.
    async fn connect(&self, address: &Uri) -> Result<Sender, SendError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let io = connector
            .call(address.clone())
            .await
            .map_err(SendError::Connect)?;
        let (sender, connection) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(SendError::Exchange)?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// Closes the connections idle for longer than `IDLE_TIMEOUT`.
    pub fn close_expired(&self, now: Instant) {
        for list in self.idle.iter() {
            list.lock().retain(|idle| !idle.expired(now));
        }
    }

    /// Idle connections to `server`, of all workers.
    pub fn idle_count(&self, server: usize) -> usize {
        let lists = &self.idle[server * self.workers..(server + 1) * self.workers];
        lists.iter().map(|list| list.lock().len()).sum()
    }
}

/// Closes the expired idle connections of every pool a few times per `IDLE_TIMEOUT`, so
/// connections left from a burst close even when no request comes to find them; until `stop`.
pub async fn close_expired_until(pools: Vec<Arc<UpstreamPool>>, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(IDLE_TIMEOUT / 4);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        // tokio's clock (the wall clock in service), so a test can move it.
        let now = tokio::time::Instant::now().into_std();
        for pool in &pools {
            pool.connections.close_expired(now);
        }
    }
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
    fn take_ready(&self) -> Option<Sender> {
        loop {
            let sender = self.lock().pop_back()?.sender;
            // Only ready connections are pooled; one that is not ready any more has closed.
            if sender.is_ready() {
                return Some(sender);
            }
        }
    }

    /// Pools `sender` once its connection is ready for another request. Its task may not have
    /// seen the end of the exchange yet (or the request body may still be uploading after an
    /// early answer); then a small task waits for it, so no request ever waits on a busy one.
    fn give_back(self: &Arc<Self>, mut sender: Sender) {
        if sender.is_ready() {
            return self.push(sender);
        }
        if sender.is_closed() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let idle = self.clone();
        runtime.spawn(async move {
            if sender.ready().await.is_ok() {
                idle.push(sender);
            }
        });
    }

    fn push(&self, sender: Sender) {
        let now = Instant::now();
        let mut idle = self.lock();
        while idle
            .front()
            .is_some_and(|oldest| oldest.expired(now) || idle.len() >= MAX_IDLE_PER_SERVER)
        {
            idle.pop_front();
        }
        idle.push_back(Idle { sender, since: now });
    }
}

/// Wraps a response so that its connection returns to the pool after the body. A 101 hands
/// the connection over to the upgrade instead.
fn pooled(
    response: Response<Incoming>,
    sender: Sender,
    idle: &Arc<IdleList>,
) -> Response<PooledBody> {
    let returning = (response.status() != StatusCode::SWITCHING_PROTOCOLS).then(|| Returning {
        sender,
        idle: idle.clone(),
    });
    response.map(|body| PooledBody { body, returning })
}

/// An upstream response body that gives its connection back once read to the end.
pub struct PooledBody {
    body: Incoming,
    returning: Option<Returning>,
}

struct Returning {
    sender: Sender,
    idle: Arc<IdleList>,
}

impl PooledBody {
    fn give_back(&mut self) {
        if let Some(Returning { sender, idle }) = self.returning.take() {
            idle.give_back(sender);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        match &frame {
            // A broken body leaves its connection unusable.
            Some(Err(_)) => self.returning = None,
            Some(Ok(_)) if !self.body.is_end_stream() => {}
            _ => self.give_back(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    /// Bodies known empty (HEAD, 204, 304) are never polled; others dropped halfway are not
    /// given back, and hyper closes their connection.
    fn drop(&mut self) {
        if self.body.is_end_stream() {
            self.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Balance;
    use crate::proxy::upstream::tests::config;
    use http_body_util::{BodyExt, Either, Empty};

    async fn pool_for_echo() -> UpstreamPool {
        let address = crate::echo::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let config = config(&[address.to_string()], Balance::RoundRobin);
        UpstreamPool::new(&config, 2).unwrap()
    }

    async fn exchange(pool: &UpstreamPool) {
        let request = Request::get("/").body(Either::Right(Empty::new())).unwrap();
        let response = pool.send(0, request).await;
        let body = response.unwrap().into_body().collect().await.unwrap();
        assert!(!body.to_bytes().is_empty());
    }

    /// One exchange, then waits until its connection is pooled (once its task has seen the
    /// end of the exchange).
    async fn one_pooled_connection(pool: &UpstreamPool) {
        exchange(pool).await;
        for _ in 0..200 {
            if pool.connections.idle_count(0) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pool.connections.idle_count(0), 1);
    }

    #[tokio::test]
    async fn idle_connections_close_after_the_idle_timeout_and_not_before() {
        let pool = pool_for_echo().await;
        one_pooled_connection(&pool).await;
        let pooled_at = Instant::now();
        pool.connections.close_expired(pooled_at + IDLE_TIMEOUT / 2);
        assert_eq!(pool.connections.idle_count(0), 1);
        pool.connections
            .close_expired(pooled_at + IDLE_TIMEOUT + Duration::from_secs(1));
        assert_eq!(pool.connections.idle_count(0), 0);
        // The next request simply opens a new connection.
        exchange(&pool).await;
    }

    #[tokio::test]
    async fn the_background_sweep_closes_idle_connections_when_no_request_comes() {
        let pool = Arc::new(pool_for_echo().await);
        one_pooled_connection(&pool).await;
        tokio::time::pause();
        let stop = CancellationToken::new();
        tokio::spawn(close_expired_until(vec![pool.clone()], stop.clone()));
        let sweeps_after = |ticks: u32| async move {
            for _ in 0..ticks {
                tokio::time::advance(IDLE_TIMEOUT / 4).await;
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
            }
        };
        sweeps_after(3).await; // 67.5 s idle
        assert_eq!(pool.connections.idle_count(0), 1);
        sweeps_after(2).await; // 112.5 s idle
        assert_eq!(pool.connections.idle_count(0), 0);
        stop.cancel();
    }
}
