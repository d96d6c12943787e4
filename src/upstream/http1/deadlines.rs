//! The deadlines of an exchange on one upstream connection, all kept by the connection's one
//! timer: the response head by `response_timeout`; once the head came, each wait for more of
//! the response body within `read_timeout`; and each wait for more of the client's request
//! body within `body_read_timeout`.
//!
//! A wait is timed from when it began (the first `Pending` of the read it waits on), so a body
//! that is not asked for (its client not reading the response) is never counted against its
//! sender. The clock is read only when such a wait begins; an exchange whose answer comes in
//! its first read, as most do, reads none. The timer is moved earlier (which takes the timer
//! wheel's lock) only when a deadline comes before the one it is armed for; a timer that fires
//! early is moved on to the next deadline, later, which costs no lock.

use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::Instant;

use super::{Connection, ExchangeError};
use crate::metrics::{Deadline, TimeoutCounters};

/// The deadlines a connection's exchanges keep, set by its pool.
#[derive(Clone, Default)]
pub(crate) struct ExchangeDeadlines {
    /// `[[upstreams]] read_timeout`: longest wait for more of a response body.
    pub read_timeout: Duration,
    /// `[server] body_read_timeout`: longest wait for more of a client's request body.
    pub body_read_timeout: Duration,
    /// Where the deadlines that fire here are counted.
    pub counters: TimeoutCounters,
}

/// What an exchange is waiting for when it polls its deadlines.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiting {
    /// The response head, due at the exchange's deadline.
    Head,
    /// More of the response body, or only the client's body.
    Body,
}

impl Connection {
    /// Notes that the response body is waiting for the upstream, from now if not already.
    pub(super) fn begin_read_wait(&mut self) {
        if self.read_wait.is_none() {
            self.read_wait = Some(Instant::now());
        }
    }

    /// Notes that the request body is waiting for the client, from now if not already.
    pub(super) fn begin_upload_wait(&mut self) {
        if self.upload_wait.is_none() {
            self.upload_wait = Some(Instant::now());
        }
    }

    /// Ready with the error of the first deadline that passed while waiting; pending (with the
    /// timer armed for the next one) otherwise.
    pub(super) fn poll_deadlines(
        &mut self,
        cx: &mut Context<'_>,
        waiting: Waiting,
    ) -> Poll<ExchangeError> {
        let Some(due) = self.next_due(waiting) else {
            return Poll::Pending;
        };
        if self.timer.deadline() > due {
            self.timer.as_mut().reset(due);
        }
        loop {
            ready!(self.timer.as_mut().poll(cx));
            let fired_at = self.timer.deadline();
            if fired_at >= due {
                return Poll::Ready(self.passed(waiting, fired_at));
            }
            // Armed for an earlier exchange or wait: on to this one's.
            self.timer.as_mut().reset(due);
        }
    }

    /// The earliest deadline of what the exchange waits for.
    fn next_due(&self, waiting: Waiting) -> Option<Instant> {
        let response = match waiting {
            Waiting::Head => Some(self.deadline),
            Waiting::Body => self.read_wait.map(|since| since + self.limits.read_timeout),
        };
        let upload = self
            .upload_wait
            .map(|since| since + self.limits.body_read_timeout);
        match (response, upload) {
            (Some(response), Some(upload)) => Some(response.min(upload)),
            (one, other) => one.or(other),
        }
    }

    /// Which deadline passed by `now`, counted.
    fn passed(&self, waiting: Waiting, now: Instant) -> ExchangeError {
        let upload_due = self
            .upload_wait
            .map(|since| since + self.limits.body_read_timeout);
        if upload_due.is_some_and(|due| due <= now) {
            self.limits.counters.count(Deadline::BodyRead);
            return ExchangeError::ClientBodyTimedOut(self.limits.body_read_timeout);
        }
        match waiting {
            // Counted with the connect timeouts, where both become a 504.
            Waiting::Head => ExchangeError::TimedOut,
            Waiting::Body => {
                self.limits.counters.count(Deadline::UpstreamRead);
                ExchangeError::ReadTimedOut(self.limits.read_timeout)
            }
        }
    }
}
