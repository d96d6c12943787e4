//! A Redis connection that belongs to one serving worker. Its callers append their commands
//! to one buffer and wait for their replies, which Redis sends back in the order the commands
//! came; one driver task on the worker's event loop writes the buffer out and reads the
//! replies in. Beside the redis crate's multiplexed connection, a call makes no channel hop
//! and no allocation, arms no timer of its own (the driver keeps one for every call it
//! waits on) and its reply is cut out of the read buffer, not built as a tree of values.
//! TCP, plain or TLS; a cluster stays on the crate's cluster connection.
//!
//! The script calls queued before the driver next writes (made in one turn of the worker's
//! event loop, or while it is still writing: under load, many) are merged into one (see
//! `script::Batch`): Redis runs the script once for all of them, each request's answer a
//! piece of the one reply.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::redis::StoreError;
use super::resp::{Frame, parse};
use super::script::{Batch, REPLY_BYTES_PER_WINDOW, SCRIPT, ScriptCall};
use crate::proxy::http1::Stream;

/// Calls waiting on one connection beyond which new ones fail at once: a stalled Redis
/// with requests arriving faster than the breaker opens must not grow memory without bound.
const MOST_WAITING: usize = 10_000;
const READ_CHUNK: usize = 16 * 1024;
/// A connection that owes replies and has answered nothing for this long past the timeout is
/// given up and the next call connects again: Redis gone without a FIN (a partition, a
/// failed-over address) would otherwise hold every call until TCP gives up, many minutes later.
const STALLED_FOR: Duration = Duration::from_secs(2);

/// Where to connect and how to open a session there.
#[derive(Clone)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    /// Never logged or put in an error.
    pub password: Option<String>,
    pub db: i64,
    pub connect_timeout: Duration,
    /// How long Redis may keep a call waiting once it could have started on it: from when
    /// the call was queued, the connection opened or Redis last answered anything on it,
    /// whichever is latest. Time a call spends behind the gateway's own earlier calls while
    /// Redis answers them is not Redis failing, so it does not count.
    pub timeout: Duration,
    /// For `rediss://`.
    pub tls: Option<Tls>,
    /// Whether script calls queued together are merged into one `EVALSHA` (one node); a
    /// cluster's are not, as their keys may live in different slots.
    pub merge: bool,
}

impl Settings {
    /// `host:port`, as logs and metrics name the node.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[derive(Clone)]
pub struct Tls {
    pub config: Arc<rustls::ClientConfig>,
    /// The name the server's certificate must hold: the URL's host.
    pub name: ServerName<'static>,
}

/// What Redis answered; an error reply is `StoreError::Server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Status(Bytes),
    Integer(i64),
    Bulk(Bytes),
    /// An array (e.g. `CLUSTER SLOTS`), as its whole frame: see `resp::tree`.
    Array(Bytes),
}

/// One command being written: RESP's array of bulk strings, its length given up front.
pub struct Command<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Command<'a> {
    pub fn new(out: &'a mut Vec<u8>, arguments: usize) -> Command<'a> {
        out.push(b'*');
        out.extend_from_slice(itoa::Buffer::new().format(arguments).as_bytes());
        out.extend_from_slice(b"\r\n");
        Command { out }
    }

    pub fn arg(&mut self, bytes: &[u8]) -> &mut Self {
        self.out.push(b'$');
        self.out
            .extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(bytes);
        self.out.extend_from_slice(b"\r\n");
        self
    }
}

pub struct Pipe {
    shared: Arc<Shared>,
}

struct Shared {
    settings: Settings,
    state: Mutex<State>,
}

struct State {
    /// Commands the driver has not taken yet.
    queued: Vec<u8>,
    /// Script calls to merge into one, written after `queued`; the last `merged` calls.
    batch: Batch,
    merged: usize,
    /// How many times the script was sent to be loaded (see `call_script`).
    script_loads: u64,
    /// Calls `first..first + calls.len()` by id, in the order of their commands.
    calls: VecDeque<Call>,
    first: u64,
    /// The call the next reply from Redis belongs to.
    unanswered: u64,
    /// When the connection opened or last read a reply: calls are timed from here (or from
    /// their queueing, if later). None while the connection is being opened.
    progress_at: Option<Instant>,
    driver_running: bool,
    driver: Option<Waker>,
    /// Whether the driver's timer covers every waiting call.
    timer_armed: bool,
    /// The pipe is gone: the driver closes the connection.
    closed: bool,
}

struct Call {
    queued_at: Instant,
    /// However Redis answers others, the call gives up this long after it was queued.
    wait: Duration,
    state: CallState,
    piece: Piece,
}

/// Which reply a call takes.
#[derive(Clone, Copy)]
enum Piece {
    /// A reply of its own.
    Whole,
    /// The next `bytes` of a bulk reply it shares with the calls merged with it, which come
    /// before it in the order; `last`: the merged call ends with it.
    Merged { bytes: usize, last: bool },
}

enum CallState {
    Waiting(Option<Waker>),
    Done(Result<Reply, StoreError>),
    /// Taken, or given up by its caller; only its place in the order is left.
    Finished,
}

impl Pipe {
    /// Connects on the first call, from the event loop that makes it.
    pub fn new(settings: Settings) -> Pipe {
        Pipe {
            shared: Arc::new(Shared {
                settings,
                state: Mutex::new(State {
                    queued: Vec::with_capacity(READ_CHUNK),
                    batch: Batch::default(),
                    merged: 0,
                    script_loads: 0,
                    calls: VecDeque::new(),
                    first: 0,
                    unanswered: 0,
                    progress_at: None,
                    driver_running: false,
                    driver: None,
                    timer_armed: false,
                    closed: false,
                }),
            }),
        }
    }

    /// Sends the command `write` appends (see `Command`) and waits for its reply, `wait` at
    /// most (see `Settings::timeout` for when it times out sooner). The first call starts the
    /// driver on its own tokio event loop.
    pub async fn call(
        &self,
        wait: Duration,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Reply, StoreError> {
        self.call_with(wait, false, write).await
    }

    /// `call`, right after `ASKING` when `asking` (see `call_script_asking`).
    pub async fn call_with(
        &self,
        wait: Duration,
        asking: bool,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Reply, StoreError> {
        let id = self.queue(wait, usize::from(asking), Piece::Whole, |state| {
            state.close_batch();
            if asking {
                Command::new(&mut state.queued, 1).arg(b"ASKING");
            }
            write(&mut state.queued);
        })?;
        self.wait(id).await
    }

    /// Checks `requests`' windows (`limits` names each one's limit) with the script `sha`,
    /// merged with the other script calls queued before the driver next writes (when the
    /// settings say so), and waits for this request's piece of the reply, four doubles per
    /// window, `wait` at most.
    ///
    /// A Redis that answers `NOSCRIPT` (restarted, flushed) is sent the script and the call
    /// is retried once. The calls of one merged call meet `NOSCRIPT` together: the first
    /// sends the script, and the others retry behind it without sending it again.
    pub async fn call_script(
        &self,
        wait: Duration,
        call: &ScriptCall<'_>,
    ) -> Result<Reply, StoreError> {
        self.script(wait, call, false).await
    }

    /// `call_script` right after `ASKING`, on a cluster node that is importing the call's
    /// slot (it answers only calls that say they were sent there by an `ASK` redirection).
    pub async fn call_script_asking(
        &self,
        wait: Duration,
        call: &ScriptCall<'_>,
    ) -> Result<Reply, StoreError> {
        self.script(wait, call, true).await
    }

    async fn script(
        &self,
        wait: Duration,
        call: &ScriptCall<'_>,
        asking: bool,
    ) -> Result<Reply, StoreError> {
        let mut loads_seen = 0;
        let first = self.queue_script(wait, call, asking, &mut loads_seen)?;
        match self.wait(first).await {
            Err(StoreError::Server(error)) if error.starts_with("NOSCRIPT") => {
                self.load_script_unless_sent_since(wait, loads_seen)?;
                let retry = self.queue_script(wait, call, asking, &mut loads_seen)?;
                self.wait(retry).await
            }
            reply => reply,
        }
    }

    /// Queues a script call (after `ASKING` when `asking`); `loads_seen` is set to how many
    /// times the script had been sent to be loaded by then.
    fn queue_script(
        &self,
        wait: Duration,
        call: &ScriptCall<'_>,
        asking: bool,
        loads_seen: &mut u64,
    ) -> Result<u64, StoreError> {
        let piece = Piece::Merged {
            bytes: REPLY_BYTES_PER_WINDOW * call.requests.len(),
            last: false,
        };
        let merge = self.shared.settings.merge && !asking;
        self.queue(wait, usize::from(asking), piece, |state| {
            if !merge || !state.batch.fits(call) {
                state.close_batch();
            }
            if asking {
                Command::new(&mut state.queued, 1).arg(b"ASKING");
            }
            state.batch.add(call);
            state.merged += 1;
            *loads_seen = state.script_loads;
        })
    }

    /// Sends the script to be loaded, unless it was sent since a call that met `NOSCRIPT`
    /// was queued (`loads_seen`): that load goes to Redis before the call's retry.
    fn load_script_unless_sent_since(
        &self,
        wait: Duration,
        loads_seen: u64,
    ) -> Result<(), StoreError> {
        if self.shared.lock().script_loads != loads_seen {
            return Ok(());
        }
        let id = self.queue(wait, 0, Piece::Whole, |state| {
            state.close_batch();
            state.script_loads += 1;
            Command::new(&mut state.queued, 3)
                .arg(b"SCRIPT")
                .arg(b"LOAD")
                .arg(SCRIPT.as_bytes());
        })?;
        // Nobody waits for its reply: the retry behind it tells whether it worked.
        drop(self.wait(id));
        Ok(())
    }

    fn wait(&self, id: u64) -> Pending<'_> {
        Pending {
            shared: &self.shared,
            id,
            taken: false,
        }
    }

    /// Queues a call: `write` appends its command, after `unheeded` commands whose replies
    /// nobody waits for (`ASKING`). The call's id.
    fn queue(
        &self,
        wait: Duration,
        unheeded: usize,
        piece: Piece,
        write: impl FnOnce(&mut State),
    ) -> Result<u64, StoreError> {
        let mut state = self.shared.lock();
        if state.calls.len() + unheeded >= MOST_WAITING {
            return Err(StoreError::Connection(format!(
                "{MOST_WAITING} calls already waiting for redis"
            )));
        }
        // The driver starts on the caller's event loop; off one, the call fails, not panics.
        let runtime =
            match state.driver_running {
                true => None,
                false => Some(tokio::runtime::Handle::try_current().map_err(|_| {
                    StoreError::Connection("called outside a tokio event loop".into())
                })?),
            };
        let nothing_queued = state.queued.is_empty() && state.merged == 0;
        write(&mut state);
        let queued_at = Instant::now();
        for _ in 0..unheeded {
            state.calls.push_back(Call {
                queued_at,
                wait,
                state: CallState::Finished,
                piece: Piece::Whole,
            });
        }
        let id = state.first + state.calls.len() as u64;
        state.calls.push_back(Call {
            queued_at,
            wait,
            state: CallState::Waiting(None),
            piece,
        });
        if let Some(runtime) = runtime {
            state.driver_running = true;
            runtime.spawn(Connection::new(self.shared.clone()));
        } else if nothing_queued || !state.timer_armed {
            // Queued commands mean the driver is already on its way to write them; an
            // unarmed timer, that it must arm for this call.
            if let Some(driver) = &state.driver {
                driver.wake_by_ref();
            }
        }
        Ok(id)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.closed = true;
        if let Some(driver) = &state.driver {
            driver.wake_by_ref();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn end(&self) -> u64 {
        self.first + self.calls.len() as u64
    }

    fn call(&mut self, id: u64) -> Option<&mut Call> {
        let index = usize::try_from(id.checked_sub(self.first)?).ok()?;
        self.calls.get_mut(index)
    }

    /// Gives call `id` its result, unless it already has one (it timed out) or its caller left.
    fn finish(&mut self, id: u64, result: Result<Reply, StoreError>) {
        let Some(call) = self.call(id) else { return };
        if let CallState::Waiting(waker) = &mut call.state {
            let waker = waker.take();
            call.state = CallState::Done(result);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// Writes the merged script call out after the queued commands; its last call is marked
    /// as where its reply ends.
    fn close_batch(&mut self) {
        if self.merged == 0 {
            return;
        }
        let mut command = Command::new(&mut self.queued, self.batch.arguments());
        self.batch.write(&mut command);
        self.merged = 0;
        if let Some(Call {
            piece: Piece::Merged { last, .. },
            ..
        }) = self.calls.back_mut()
        {
            *last = true;
        }
    }

    /// The next reply from Redis arrived.
    fn answer(&mut self, result: Result<Reply, StoreError>) -> Result<(), StoreError> {
        let Some(call) = self.call(self.unanswered) else {
            return Err(StoreError::Protocol("a reply to no command".into()));
        };
        match call.piece {
            Piece::Whole => {
                self.finish(self.unanswered, result);
                self.unanswered += 1;
            }
            Piece::Merged { .. } => self.share(result)?,
        }
        self.drop_finished();
        Ok(())
    }

    /// Gives each call of a merged script call its piece of the reply: its bytes, or the
    /// error (all of them fail together, as one script run).
    fn share(&mut self, result: Result<Reply, StoreError>) -> Result<(), StoreError> {
        let (mut calls, mut bytes) = (0, 0);
        loop {
            match self.call(self.unanswered + calls).map(|call| call.piece) {
                Some(Piece::Merged { bytes: piece, last }) => {
                    calls += 1;
                    bytes += piece;
                    if last {
                        break;
                    }
                }
                _ => return Err(StoreError::Protocol("a reply to no command".into())),
            }
        }
        let result = match result {
            Ok(Reply::Bulk(reply)) if reply.len() != bytes => Err(StoreError::Protocol(format!(
                "a reply of {} bytes to calls of {bytes}",
                reply.len()
            ))),
            result => result,
        };
        let mut start = 0;
        for id in self.unanswered..self.unanswered + calls {
            let Some(Call {
                piece: Piece::Merged { bytes: piece, .. },
                ..
            }) = self.call(id)
            else {
                continue;
            };
            let end = start + *piece;
            let mine = match &result {
                Ok(Reply::Bulk(reply)) => Ok(Reply::Bulk(reply.slice(start..end))),
                other => other.clone(),
            };
            start = end;
            self.finish(id, mine);
        }
        self.unanswered += calls;
        Ok(())
    }

    /// Forgets calls from the front that are over: answered by Redis and taken or given up.
    fn drop_finished(&mut self) {
        while self.first < self.unanswered
            && matches!(self.calls.front(), Some(call) if matches!(call.state, CallState::Finished))
        {
            self.calls.pop_front();
            self.first += 1;
        }
    }

    /// Times out every waiting call whose time is up; the earliest expiry left.
    fn expire(&mut self, now: Instant, timeout: Duration) -> Option<Instant> {
        let mut earliest: Option<Instant> = None;
        let progress_at = self.progress_at;
        for id in self.unanswered..self.end() {
            let Some(call) = self.call(id) else { break };
            if !matches!(call.state, CallState::Waiting(_)) {
                continue;
            }
            let (at, given) = expiry(call, progress_at, timeout);
            if at <= now {
                self.finish(id, Err(StoreError::Timeout(given)));
            } else if earliest.is_none_or(|e| at < e) {
                earliest = Some(at);
            }
        }
        earliest
    }

    /// When the connection counts as stalled: `STALLED_FOR` past the time the oldest call
    /// Redis has not answered (waited for or given up: either way its reply is owed) was due.
    fn stalled_at(&mut self, timeout: Duration) -> Option<Instant> {
        let progress = self.progress_at?;
        let oldest = self.unanswered;
        let call = self.call(oldest)?;
        Some(expiry(call, Some(progress), timeout).0 + STALLED_FOR)
    }

    /// The connection is over: every call still waiting for Redis fails with `error`.
    fn stop(&mut self, error: StoreError) {
        for id in self.unanswered..self.end() {
            self.finish(id, Err(error.clone()));
        }
        self.unanswered = self.end();
        self.progress_at = None;
        self.queued.clear();
        self.batch.clear();
        self.merged = 0;
        self.driver_running = false;
        self.driver = None;
        self.timer_armed = false;
        self.drop_finished();
    }
}

/// When `call` times out: `timeout` after Redis could have started on it (see
/// `Settings::timeout`; `progress_at` is when the connection opened or last read a reply), or
/// when its `wait` is over, whichever is first; and how long it was given.
fn expiry(call: &Call, progress_at: Option<Instant>, timeout: Duration) -> (Instant, Duration) {
    let deadline = call.queued_at + call.wait;
    match progress_at {
        Some(progress) if call.queued_at.max(progress) + timeout < deadline => {
            (call.queued_at.max(progress) + timeout, timeout)
        }
        // Still opening: the connect timeout stands in for Redis' answer.
        _ => (deadline, call.wait),
    }
}

/// A call's wait for its reply; dropped early, the call is given up.
struct Pending<'a> {
    shared: &'a Shared,
    id: u64,
    taken: bool,
}

impl Future for Pending<'_> {
    type Output = Result<Reply, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.lock();
        let Some(call) = state.call(self.id) else {
            return Poll::Ready(Err(StoreError::Protocol("call lost".into())));
        };
        match std::mem::replace(&mut call.state, CallState::Finished) {
            CallState::Done(result) => {
                state.drop_finished();
                drop(state);
                self.taken = true;
                Poll::Ready(result)
            }
            CallState::Waiting(waker) => {
                let waker = match waker {
                    Some(waker) if waker.will_wake(cx.waker()) => waker,
                    _ => cx.waker().clone(),
                };
                call.state = CallState::Waiting(Some(waker));
                Poll::Pending
            }
            CallState::Finished => Poll::Ready(Err(StoreError::Protocol("call lost".into()))),
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(call) = state.call(self.id) {
            call.state = CallState::Finished;
            state.drop_finished();
        }
    }
}

/// The driver: one task per open connection, ending with it.
struct Connection {
    shared: Arc<Shared>,
    link: Link,
    /// Commands taken from `State::queued`, written up to `written`.
    writing: Vec<u8>,
    written: usize,
    read: BytesMut,
    /// Armed for the earliest deadline of the calls waiting on Redis.
    timer: Pin<Box<Sleep>>,
    armed: bool,
    /// The calls were told why the connection ended.
    stopped: bool,
}

enum Link {
    Opening(Pin<Box<dyn Future<Output = Result<Stream, StoreError>> + Send>>),
    Open(Stream),
}

impl Connection {
    fn new(shared: Arc<Shared>) -> Connection {
        let settings = shared.settings.clone();
        Connection {
            shared,
            link: Link::Opening(Box::pin(open(settings))),
            writing: Vec::with_capacity(READ_CHUNK),
            written: 0,
            read: BytesMut::with_capacity(READ_CHUNK),
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: false,
            stopped: false,
        }
    }

    /// Writes, reads and times out as far as it can without waiting.
    fn advance(&mut self, cx: &mut Context<'_>) -> Result<(), StoreError> {
        {
            let mut state = self.shared.lock();
            if state.closed {
                return Err(StoreError::Connection("the store was replaced".into()));
            }
            if !state
                .driver
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                state.driver = Some(cx.waker().clone());
            }
        }
        if let Link::Opening(opening) = &mut self.link {
            match opening.as_mut().poll(cx) {
                Poll::Ready(stream) => {
                    self.link = Link::Open(stream?);
                    // Calls are timed from here now, sooner than the deadlines the timer
                    // was armed for while opening.
                    let mut state = self.shared.lock();
                    state.progress_at = Some(Instant::now());
                    state.timer_armed = false;
                }
                Poll::Pending => return self.time_out(cx),
            }
        }
        // Replies first: a worker whose event loop was busy past a call's time finds the
        // answer waiting, and that call did not time out.
        self.read(cx)?;
        self.time_out(cx)?;
        self.write(cx)
    }

    fn write(&mut self, cx: &mut Context<'_>) -> Result<(), StoreError> {
        let Link::Open(stream) = &mut self.link else {
            return Ok(());
        };
        loop {
            if self.written == self.writing.len() {
                self.writing.clear();
                self.written = 0;
                let mut state = self.shared.lock();
                state.close_batch();
                std::mem::swap(&mut state.queued, &mut self.writing);
                if self.writing.is_empty() {
                    drop(state);
                    // TLS keeps what the socket did not take; plain TCP has nothing to flush.
                    return match Pin::new(&mut *stream).poll_flush(cx) {
                        Poll::Ready(Err(error)) => Err(lost(error)),
                        _ => Ok(()),
                    };
                }
            }
            match Pin::new(&mut *stream).poll_write(cx, &self.writing[self.written..]) {
                Poll::Ready(Ok(0)) => return Err(lost("redis stopped taking commands")),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(error)) => return Err(lost(error)),
                Poll::Pending => return Ok(()),
            }
        }
    }

    fn read(&mut self, cx: &mut Context<'_>) -> Result<(), StoreError> {
        let Link::Open(stream) = &mut self.link else {
            return Ok(());
        };
        loop {
            if self.read.capacity() - self.read.len() < READ_CHUNK / 4 {
                self.read.reserve(READ_CHUNK);
            }
            match tokio_util::io::poll_read_buf(Pin::new(&mut *stream), cx, &mut self.read) {
                Poll::Ready(Ok(0)) => return Err(lost("redis closed the connection")),
                Poll::Ready(Ok(_)) => deliver(&self.shared, &mut self.read)?,
                Poll::Ready(Err(error)) => return Err(lost(error)),
                Poll::Pending => return Ok(()),
            }
        }
    }
}

/// Hands every whole reply read so far to its call.
fn deliver(shared: &Shared, read: &mut BytesMut) -> Result<(), StoreError> {
    let mut state = shared.lock();
    state.progress_at = Some(Instant::now());
    while let Some((frame, length)) = parse(read).map_err(StoreError::Protocol)? {
        let result = match frame {
            Frame::Bulk(range) => Ok(Reply::Bulk(read.split_to(length).freeze().slice(range))),
            Frame::Status(range) => Ok(Reply::Status(read.split_to(length).freeze().slice(range))),
            Frame::Error(range) => {
                let text = String::from_utf8_lossy(&read[range]).into_owned();
                read.advance(length);
                Err(StoreError::Server(text))
            }
            Frame::Integer(n) => {
                read.advance(length);
                Ok(Reply::Integer(n))
            }
            Frame::Nil => {
                read.advance(length);
                Ok(Reply::Nil)
            }
            Frame::Array => Ok(Reply::Array(read.split_to(length).freeze())),
        };
        let replica = matches!(&result, Err(StoreError::Server(e)) if e.starts_with("READONLY"));
        state.answer(result)?;
        if replica {
            // The node was demoted in a failover; connecting again (the name resolved anew)
            // finds the new primary.
            return Err(StoreError::Connection(
                "redis answered READONLY: a replica now; connecting again".into(),
            ));
        }
    }
    Ok(())
}

impl Connection {
    /// Fails the calls whose deadline passed, gives the connection up when it stalled, and
    /// keeps the timer on whichever comes first next. The timer is only moved when it fires
    /// or when a call came that it does not cover, not once per call.
    fn time_out(&mut self, cx: &mut Context<'_>) -> Result<(), StoreError> {
        loop {
            let covered = self.shared.lock().timer_armed;
            if self.armed && covered && self.timer.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            let now = Instant::now();
            let mut state = self.shared.lock();
            let timeout = self.shared.settings.timeout;
            let earliest = state.expire(now, timeout);
            let stalled_at = state.stalled_at(timeout);
            if stalled_at.is_some_and(|at| at <= now) {
                return Err(StoreError::Connection(format!(
                    "no reply from redis for {STALLED_FOR:?} past a call's time; connecting again"
                )));
            }
            // Armed for a stall alone, the timer does not cover a new call's deadline.
            state.timer_armed = earliest.is_some();
            drop(state);
            let Some(wake_at) = [earliest, stalled_at].into_iter().flatten().min() else {
                self.armed = false;
                return Ok(());
            };
            if !self.armed || self.timer.deadline() != wake_at {
                self.timer.as_mut().reset(wake_at);
            }
            self.armed = true;
            if self.timer.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
        }
    }
}

impl Future for Connection {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.advance(cx) {
            Ok(()) => Poll::Pending,
            Err(error) => {
                tracing::debug!(%error, "redis connection closed");
                self.shared.lock().stop(error);
                self.stopped = true;
                Poll::Ready(())
            }
        }
    }
}

impl Drop for Connection {
    /// Dropped unfinished (its event loop is going away), it still frees its calls and lets
    /// the next call start a driver.
    fn drop(&mut self) {
        if !self.stopped {
            let error = StoreError::Connection("the connection's event loop stopped".into());
            self.shared.lock().stop(error);
        }
    }
}

fn lost(error: impl std::fmt::Display) -> StoreError {
    StoreError::Connection(error.to_string())
}

/// Connects and opens the session: AUTH and SELECT as the URL asks, within the connect
/// timeout.
async fn open(settings: Settings) -> Result<Stream, StoreError> {
    let address = format!("{}:{}", settings.host, settings.port);
    let opening = async {
        let tcp = TcpStream::connect((settings.host.as_str(), settings.port))
            .await
            .map_err(|e| StoreError::Connection(format!("cannot connect to {address}: {e}")))?;
        tcp.set_nodelay(true).map_err(lost)?;
        let mut stream = match &settings.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let io = TokioIo::new(TokioIo::new(tcp));
                let tls = connector.connect(tls.name.clone(), io).await.map_err(|e| {
                    StoreError::Connection(format!("TLS with {address} failed: {e}"))
                })?;
                Stream::Tls(Box::new(tls))
            }
        };
        handshake(&mut stream, &settings).await?;
        Ok(stream)
    };
    match tokio::time::timeout(settings.connect_timeout, opening).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Connection(format!(
            "cannot connect to {address} within {:?}",
            settings.connect_timeout
        ))),
    }
}

async fn handshake(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    settings: &Settings,
) -> Result<(), StoreError> {
    let mut commands = Vec::new();
    let mut steps = Vec::new();
    if let Some(password) = &settings.password {
        let user = settings.username.as_deref();
        let mut auth = Command::new(&mut commands, 2 + usize::from(user.is_some()));
        auth.arg(b"AUTH");
        if let Some(user) = user {
            auth.arg(user.as_bytes());
        }
        auth.arg(password.as_bytes());
        steps.push("AUTH");
    }
    if settings.db != 0 {
        let db = itoa::Buffer::new().format(settings.db).as_bytes().to_vec();
        Command::new(&mut commands, 2).arg(b"SELECT").arg(&db);
        steps.push("SELECT");
    }
    if steps.is_empty() {
        return Ok(());
    }
    stream.write_all(&commands).await.map_err(lost)?;
    stream.flush().await.map_err(lost)?;
    let mut read = BytesMut::with_capacity(512);
    let mut steps = steps.into_iter();
    let mut step = steps.next();
    while let Some(command) = step {
        let Some((frame, length)) = parse(&read).map_err(StoreError::Protocol)? else {
            if stream.read_buf(&mut read).await.map_err(lost)? == 0 {
                return Err(lost(format!("redis closed the connection at {command}")));
            }
            continue;
        };
        if let Frame::Error(range) = frame {
            let text = String::from_utf8_lossy(&read[range]);
            return Err(StoreError::Connection(format!("{command} refused: {text}")));
        }
        read.advance(length);
        step = steps.next();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = b"before".to_vec();
        Command::new(&mut out, 3)
            .arg(b"SET")
            .arg(b"k")
            .arg(b"two\r\nlines");
        assert_eq!(
            out,
            b"before*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\ntwo\r\nlines\r\n"
        );
    }
}
