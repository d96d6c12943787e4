//! The watch of one client connection: what its requests and its socket have done (progress
//! counters the serving code bumps), checked a few times per deadline by one periodic timer,
//! never a timer per request. It closes a connection that is idle for `idle_timeout`, whose
//! request head takes longer than `header_read_timeout`, or that makes no progress sending
//! to a client for `send_timeout`: its socket's writes blocked and none going through, or (HTTP/2)
//! a response waiting for the client's flow-control window to take its next piece.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::{Deadline, TimeoutCounters};

/// How many send-ticks (a quarter of `send_timeout` each) a stream's wait is counted under;
/// more than the five a wait may last before it is cut.
const TICKS: usize = 8;
/// A stream waiting since this many ticks ago has waited at least `send_timeout`.
const STALL_TICKS: u32 = 5;

/// What the watch needs to know about a connection's requests and socket.
pub(super) struct Activity {
    opened: Instant,
    started: AtomicU64,
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` (plus one) when bytes of a request head began to arrive on
    /// an idle HTTP/1 connection; 0 when no head is pending.
    head_since_ms: AtomicU64,
    /// HTTP/2 interleaves frames of many streams, so a pending head cannot be told apart.
    multiplexed: AtomicBool,
    /// Writes to the client that went through.
    sent: AtomicU64,
    /// The last write to the client could not go through (the client is not reading).
    send_blocked: AtomicBool,
    /// The current send-tick, advanced by the watch.
    send_tick: AtomicU32,
    /// HTTP/2 responses waiting for the client to take their next piece, by the tick their
    /// wait began in (modulo `TICKS`).
    waiting_streams: [AtomicU32; TICKS],
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            started: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            head_since_ms: AtomicU64::new(0),
            multiplexed: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            send_blocked: AtomicBool::new(false),
            send_tick: AtomicU32::new(0),
            waiting_streams: Default::default(),
        }
    }

    /// Bytes came from the client: on an idle HTTP/1 connection, a request head begins.
    pub(super) fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_since_ms.load(Ordering::Relaxed) == 0
            && !self.multiplexed.load(Ordering::Relaxed)
        {
            let since = self.opened.elapsed().as_millis() as u64 + 1;
            self.head_since_ms.store(since, Ordering::Relaxed);
        }
    }

    /// A write to the client went through. Only the connection's task writes, so a load and
    /// a store do (no atomic read-modify-write on the hot path).
    pub(super) fn wrote(&self) {
        let sent = self.sent.load(Ordering::Relaxed);
        self.sent.store(sent.wrapping_add(1), Ordering::Relaxed);
        self.send_blocked.store(false, Ordering::Relaxed);
    }

    /// A write to the client could not go through now.
    pub(super) fn write_blocked(&self) {
        self.send_blocked.store(true, Ordering::Relaxed);
    }

    /// Everything written so far has gone through (a flush completed).
    pub(super) fn flushed(&self) {
        self.send_blocked.store(false, Ordering::Relaxed);
    }

    /// An HTTP/2 response begins to wait for the client to take its next piece; returns the
    /// bucket to give to `stream_resumed`.
    pub(super) fn stream_waits(&self) -> usize {
        let bucket = self.send_tick.load(Ordering::Relaxed) as usize % TICKS;
        self.waiting_streams[bucket].fetch_add(1, Ordering::Relaxed);
        bucket
    }

    /// The wait that `stream_waits` began is over.
    pub(super) fn stream_resumed(&self, bucket: usize) {
        self.waiting_streams[bucket].fetch_sub(1, Ordering::Relaxed);
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

/// A request being answered, from its head until its response is written (or dropped) and
/// its body read (or dropped); released on drop, also when the client goes away.
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

    pub(super) fn activity(&self) -> &Activity {
        &self.0
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the watch found.
pub(super) enum Verdict {
    Keep,
    Idle,
    SlowHead,
    SendStalled,
}

/// The deadlines the watch keeps.
#[derive(Clone)]
pub(super) struct WatchedDeadlines {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub send_timeout: Duration,
    /// Where the ones that fire are counted.
    pub counters: TimeoutCounters,
}

/// Checks a connection a few times per deadline, so an idle connection closes within 1.25×
/// `idle_timeout`, a slow head within 1.25× `header_read_timeout` and a stalled send within
/// 1.25× `send_timeout`, without a timer reset per request.
pub(super) struct IdleWatch<'a> {
    pub(super) next_check: Instant,
    period: Duration,
    /// The connection settings' own: every connection holds one of these.
    deadlines: &'a WatchedDeadlines,
    seen_started: u64,
    quiet_since: Instant,
    seen_sent: u64,
    /// Since when the watch has seen no write go through while one was blocked.
    send_quiet_since: Instant,
    next_send_tick: Instant,
}

impl<'a> IdleWatch<'a> {
    pub(super) fn new(deadlines: &'a WatchedDeadlines) -> IdleWatch<'a> {
        let now = Instant::now();
        let shortest = (deadlines.idle_timeout)
            .min(deadlines.header_read_timeout)
            .min(deadlines.send_timeout);
        let period = (shortest / 4).max(Duration::from_millis(10));
        IdleWatch {
            next_check: now + period,
            period,
            deadlines,
            seen_started: 0,
            quiet_since: now,
            seen_sent: 0,
            send_quiet_since: now,
            next_send_tick: now + deadlines.send_timeout / 4,
        }
    }

    /// The verdict on `activity` now; a closing one is counted.
    pub(super) fn check(&mut self, activity: &Activity) -> Verdict {
        let now = Instant::now();
        self.next_check = now + self.period;
        let verdict = self.verdict(activity, now);
        let fired = match verdict {
            Verdict::Keep => return verdict,
            Verdict::Idle => Deadline::Idle,
            Verdict::SlowHead => Deadline::HeaderRead,
            Verdict::SendStalled => Deadline::Send,
        };
        self.deadlines.counters.count(fired);
        verdict
    }

    fn verdict(&mut self, activity: &Activity, now: Instant) -> Verdict {
        let started = activity.started.load(Ordering::Relaxed);
        let header_read_timeout = self.deadlines.header_read_timeout;
        let never_asked =
            started == 0 && now.duration_since(activity.opened) >= header_read_timeout;
        let head_too_slow = activity
            .pending_head_for(now)
            .is_some_and(|d| d >= header_read_timeout);
        if never_asked || head_too_slow {
            return Verdict::SlowHead;
        }
        if self.send_stalled(activity, now) || self.stream_stalled(activity, now) {
            return Verdict::SendStalled;
        }
        if started != self.seen_started || activity.in_flight.load(Ordering::Relaxed) > 0 {
            self.seen_started = started;
            self.quiet_since = now;
            return Verdict::Keep;
        }
        if now.duration_since(self.quiet_since) >= self.deadlines.idle_timeout {
            Verdict::Idle
        } else {
            Verdict::Keep
        }
    }

    /// Writes to the client have been blocked, none going through, for `send_timeout`.
    fn send_stalled(&mut self, activity: &Activity, now: Instant) -> bool {
        let sent = activity.sent.load(Ordering::Relaxed);
        if !activity.send_blocked.load(Ordering::Relaxed) || sent != self.seen_sent {
            self.seen_sent = sent;
            self.send_quiet_since = now;
            return false;
        }
        now.duration_since(self.send_quiet_since) >= self.deadlines.send_timeout
    }

    /// An HTTP/2 response has waited `send_timeout` for the client to take its next piece.
    /// Checked when the send-tick advances, every quarter of `send_timeout`: a wait counted
    /// under the tick five ago began between four and five quarters ago.
    fn stream_stalled(&mut self, activity: &Activity, now: Instant) -> bool {
        if now < self.next_send_tick {
            return false;
        }
        self.next_send_tick = now + self.deadlines.send_timeout / 4;
        let tick = activity.send_tick.load(Ordering::Relaxed).wrapping_add(1);
        activity.send_tick.store(tick, Ordering::Relaxed);
        let oldest = tick.wrapping_sub(STALL_TICKS) as usize % TICKS;
        activity.waiting_streams[oldest].load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlines(send_timeout: Duration) -> WatchedDeadlines {
        WatchedDeadlines {
            header_read_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(3600),
            send_timeout,
            counters: TimeoutCounters::default(),
        }
    }

    /// Runs the watch's checks as its timer would, for `span`.
    async fn checks_for(watch: &mut IdleWatch<'_>, activity: &Activity, span: Duration) -> bool {
        let end = Instant::now() + span;
        while Instant::now() < end {
            tokio::time::sleep_until(watch.next_check).await;
            if let Verdict::SendStalled = watch.check(activity) {
                return true;
            }
        }
        false
    }

    #[tokio::test(start_paused = true)]
    async fn a_blocked_write_is_cut_after_send_timeout_and_any_progress_restarts_the_wait() {
        let activity = Arc::new(Activity::new());
        let _answering = Answering::begin(&activity, http::Version::HTTP_11);
        let deadlines = deadlines(Duration::from_secs(4));
        let mut watch = IdleWatch::new(&deadlines);
        activity.write_blocked();
        assert!(!checks_for(&mut watch, &activity, Duration::from_secs(3)).await);
        // One write goes through, then the socket blocks again: a new wait.
        activity.wrote();
        activity.write_blocked();
        assert!(!checks_for(&mut watch, &activity, Duration::from_millis(3900)).await);
        let started = Instant::now();
        assert!(checks_for(&mut watch, &activity, Duration::from_secs(2)).await);
        assert!(started.elapsed() <= Duration::from_millis(1100));
        // A socket that is not blocked is never stalled, however long nothing is written.
        activity.flushed();
        assert!(!checks_for(&mut watch, &activity, Duration::from_secs(30)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_waiting_for_its_window_is_cut_after_four_to_five_quarters() {
        let activity = Arc::new(Activity::new());
        let deadlines = deadlines(Duration::from_secs(4));
        let mut watch = IdleWatch::new(&deadlines);
        // A stream that waits and resumes within the timeout, again and again, is never cut.
        for _ in 0..6 {
            let bucket = activity.stream_waits();
            assert!(!checks_for(&mut watch, &activity, Duration::from_secs(3)).await);
            activity.stream_resumed(bucket);
        }
        let began = Instant::now();
        let _bucket = activity.stream_waits();
        assert!(checks_for(&mut watch, &activity, Duration::from_secs(10)).await);
        let waited = began.elapsed();
        assert!(
            waited >= Duration::from_secs(4) && waited <= Duration::from_secs(6),
            "{waited:?}"
        );
    }
}
