//! The calls waiting on one connection, in the order of their commands: which reply each
//! takes (its own, or its piece of a merged call's), when each times out, and the wait of
//! the caller, which may give up at any point and still keeps its place.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::{Command, Merge, Reply, STALLED_FOR, Shared};
use crate::store::error::{ProtocolError, StoreError};

pub(super) struct State<M> {
    /// Commands the driver has not taken yet.
    pub(super) queued: Vec<u8>,
    /// Calls to merge into one, written after `queued`; the last `merged` calls.
    pub(super) batch: M,
    pub(super) merged: usize,
    /// How many times the script was sent to be loaded (see `call_script`).
    pub(super) script_loads: u64,
    /// Calls `first..first + calls.len()` by id, in the order of their commands.
    pub(super) calls: VecDeque<Call>,
    pub(super) first: u64,
    /// The call the next reply from Redis belongs to.
    pub(super) unanswered: u64,
    /// When the connection opened or last read a reply: calls are timed from here (or from
    /// when they were written, if later). None while the connection is being opened.
    pub(super) progress_at: Option<Instant>,
    /// Calls before this id were taken by the driver to be written.
    pub(super) sent_end: u64,
    pub(super) driver_running: bool,
    pub(super) driver: Option<Waker>,
    /// Whether the driver's timer covers every waiting call.
    pub(super) timer_armed: bool,
    /// The pipe is gone: the driver closes the connection.
    pub(super) closed: bool,
}

pub(super) struct Call {
    pub(super) queued_at: Instant,
    /// When the driver took the call's command to write it: until then the call waits on its
    /// own worker's event loop, not on Redis.
    pub(super) sent_at: Option<Instant>,
    /// However Redis answers others, the call gives up this long after it was queued.
    pub(super) wait: Duration,
    pub(super) state: CallState,
    pub(super) piece: Piece,
}

/// Which reply a call takes.
#[derive(Clone, Copy)]
pub(super) enum Piece {
    /// A reply of its own.
    Whole,
    /// The next `bytes` of a bulk reply it shares with the calls merged with it, which come
    /// before it in the order; `last`: the merged call ends with it.
    Merged { bytes: usize, last: bool },
}

pub(super) enum CallState {
    Waiting(Option<Waker>),
    Done(Result<Reply, StoreError>),
    /// Taken, or given up by its caller; only its place in the order is left.
    Finished,
}

impl<M: Merge> State<M> {
    pub(super) fn end(&self) -> u64 {
        self.first + self.calls.len() as u64
    }

    pub(super) fn call(&mut self, id: u64) -> Option<&mut Call> {
        let index = usize::try_from(id.checked_sub(self.first)?).ok()?;
        self.calls.get_mut(index)
    }

    /// Gives call `id` its result, unless it already has one (it timed out) or its caller left.
    pub(super) fn finish(&mut self, id: u64, result: Result<Reply, StoreError>) {
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
    pub(super) fn close_batch(&mut self) {
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

    /// The driver took every queued command to write it, at `now`.
    pub(super) fn mark_sent(&mut self, now: Instant) {
        for id in self.sent_end.max(self.first)..self.end() {
            if let Some(call) = self.call(id) {
                call.sent_at = Some(now);
            }
        }
        self.sent_end = self.end();
        // The calls just sent are due sooner than the timer may have been armed for.
        self.timer_armed = false;
    }

    /// The next reply from Redis arrived.
    pub(super) fn answer(&mut self, result: Result<Reply, StoreError>) -> Result<(), StoreError> {
        let Some(call) = self.call(self.unanswered) else {
            return Err(ProtocolError::ReplyToNoCommand.into());
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
    pub(super) fn share(&mut self, result: Result<Reply, StoreError>) -> Result<(), StoreError> {
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
                _ => return Err(ProtocolError::ReplyToNoCommand.into()),
            }
        }
        let result = match result {
            Ok(Reply::Bulk(reply)) if reply.len() != bytes => Err(ProtocolError::MergedLength {
                got: reply.len(),
                expected: bytes,
            }
            .into()),
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
    pub(super) fn drop_finished(&mut self) {
        while self.first < self.unanswered
            && matches!(self.calls.front(), Some(call) if matches!(call.state, CallState::Finished))
        {
            self.calls.pop_front();
            self.first += 1;
        }
    }

    /// Times out every waiting call whose time is up; the earliest expiry left.
    pub(super) fn expire(&mut self, now: Instant, timeout: Duration) -> Option<Instant> {
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
    pub(super) fn stalled_at(&mut self, timeout: Duration) -> Option<Instant> {
        let progress = self.progress_at?;
        let oldest = self.unanswered;
        let call = self.call(oldest)?;
        Some(expiry(call, Some(progress), timeout).0 + STALLED_FOR)
    }

    /// The connection is over: every call still waiting for Redis fails with `error`.
    pub(super) fn stop(&mut self, error: StoreError) {
        for id in self.unanswered..self.end() {
            self.finish(id, Err(error.clone()));
        }
        self.unanswered = self.end();
        self.sent_end = self.end();
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
/// `Settings::timeout`: once it was written and `progress_at`, when the connection opened or
/// last read a reply), or when its `wait` is over, whichever is first; and how long it was
/// given. A call not written yet waits on its own event loop (a burst's requests queue behind
/// each other there), which is not Redis failing: only `wait` bounds it.
fn expiry(call: &Call, progress_at: Option<Instant>, timeout: Duration) -> (Instant, Duration) {
    let deadline = call.queued_at + call.wait;
    match (call.sent_at, progress_at) {
        (Some(sent), Some(progress)) if sent.max(progress) + timeout < deadline => {
            (sent.max(progress) + timeout, timeout)
        }
        // Still opening: the connect timeout stands in for Redis' answer.
        _ => (deadline, call.wait),
    }
}

/// A call's wait for its reply; dropped early, the call is given up.
pub(super) struct Pending<'a, M: Merge> {
    pub(super) shared: &'a Shared<M>,
    pub(super) id: u64,
    pub(super) taken: bool,
}

impl<M: Merge> Future for Pending<'_, M> {
    type Output = Result<Reply, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.shared.lock();
        let Some(call) = state.call(self.id) else {
            return Poll::Ready(Err(ProtocolError::CallLost.into()));
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
            CallState::Finished => Poll::Ready(Err(ProtocolError::CallLost.into())),
        }
    }
}

impl<M: Merge> Drop for Pending<'_, M> {
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
