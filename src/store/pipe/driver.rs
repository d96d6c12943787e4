//! The driver of one connection: a task on the event loop of the worker that opened it, which
//! connects (TCP, TLS, `AUTH`, `SELECT`), writes the queued commands, reads replies into their
//! calls and times the calls out, until the connection ends; then every waiting call learns
//! why, and the next call starts another.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::{Command, Merge, READ_CHUNK, Reply, STALLED_FOR, Settings, Shared};
use crate::http1::stream::Stream;
use crate::store::error::{ConnectionError, ErrorReply, StoreError};
use crate::store::resp::{Frame, parse};

/// The driver: one task per open connection, ending with it.
pub(super) struct Connection<M: Merge> {
    shared: Arc<Shared<M>>,
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

impl<M: Merge> Connection<M> {
    pub(super) fn new(shared: Arc<Shared<M>>) -> Connection<M> {
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
                return Err(ConnectionError::Replaced.into());
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
        // answer waiting, and that call did not time out. Then what is queued is written, and
        // only calls written are timed on Redis' answer.
        self.read(cx)?;
        self.write(cx)?;
        self.time_out(cx)
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
                if !self.writing.is_empty() {
                    state.mark_sent(Instant::now());
                }
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
                Poll::Ready(Ok(0)) => return Err(ConnectionError::WriteZero.into()),
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
                Poll::Ready(Ok(0)) => return Err(ConnectionError::Closed.into()),
                Poll::Ready(Ok(_)) => deliver(&self.shared, &mut self.read)?,
                Poll::Ready(Err(error)) => return Err(lost(error)),
                Poll::Pending => return Ok(()),
            }
        }
    }
}

/// Hands every whole reply read so far to its call.
fn deliver<M: Merge>(shared: &Shared<M>, read: &mut BytesMut) -> Result<(), StoreError> {
    let mut state = shared.lock();
    state.progress_at = Some(Instant::now());
    while let Some((frame, length)) = parse(read)? {
        let result = match frame {
            Frame::Bulk(range) => Ok(Reply::Bulk(read.split_to(length).freeze().slice(range))),
            Frame::Status(range) => Ok(Reply::Status(read.split_to(length).freeze().slice(range))),
            Frame::Error(range) => {
                let reply = ErrorReply::new(String::from_utf8_lossy(&read[range]));
                read.advance(length);
                Err(StoreError::Server(reply))
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
        let replica = matches!(&result, Err(StoreError::Server(e)) if e.is_readonly());
        state.answer(result)?;
        if replica {
            // The node was demoted in a failover; connecting again (the name resolved anew)
            // finds the new primary.
            return Err(ConnectionError::Replica.into());
        }
    }
    Ok(())
}

impl<M: Merge> Connection<M> {
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
                return Err(ConnectionError::Stalled {
                    stalled_for: STALLED_FOR,
                }
                .into());
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

impl<M: Merge> Future for Connection<M> {
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

impl<M: Merge> Drop for Connection<M> {
    /// Dropped unfinished (its event loop is going away), it still frees its calls and lets
    /// the next call start a driver.
    fn drop(&mut self) {
        if !self.stopped {
            let error = ConnectionError::EventLoopStopped.into();
            self.shared.lock().stop(error);
        }
    }
}

fn lost(error: std::io::Error) -> StoreError {
    ConnectionError::io(error).into()
}

/// Connects and opens the session: AUTH and SELECT as the URL asks, within the connect
/// timeout.
async fn open(settings: Settings) -> Result<Stream, StoreError> {
    let address: Arc<str> = format!("{}:{}", settings.host, settings.port).into();
    let opening = async {
        let tcp = TcpStream::connect((settings.host.as_str(), settings.port))
            .await
            .map_err(|e| ConnectionError::Connect {
                address: address.clone(),
                source: Arc::new(e),
            })?;
        tcp.set_nodelay(true).map_err(lost)?;
        let mut stream = match &settings.tls {
            None => Stream::Plain(tcp),
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let io = TokioIo::new(TokioIo::new(tcp));
                let tls = connector.connect(tls.name.clone(), io).await.map_err(|e| {
                    ConnectionError::Tls {
                        address: address.clone(),
                        source: Arc::new(e),
                    }
                })?;
                Stream::Tls(Box::new(tls))
            }
        };
        handshake(&mut stream, &settings).await?;
        Ok(stream)
    };
    match tokio::time::timeout(settings.connect_timeout, opening).await {
        Ok(result) => result,
        Err(_) => Err(ConnectionError::ConnectTimeout {
            address,
            within: settings.connect_timeout,
        }
        .into()),
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
        let Some((frame, length)) = parse(&read)? else {
            if stream.read_buf(&mut read).await.map_err(lost)? == 0 {
                return Err(ConnectionError::ClosedAt { command }.into());
            }
            continue;
        };
        if let Frame::Error(range) = frame {
            let reply = ErrorReply::new(String::from_utf8_lossy(&read[range]));
            return Err(ConnectionError::Refused { command, reply }.into());
        }
        read.advance(length);
        step = steps.next();
    }
    Ok(())
}
