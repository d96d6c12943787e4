//! The byte tunnel of an upgraded connection (a 101 answer, e.g. WebSocket), with its two
//! deadlines: `tunnel_idle_timeout` (no byte either way) and `tunnel_send_timeout` (a side
//! that takes nothing written to it). Without them a tunnel whose peer stopped reading held
//! its connection slot and buffers for good. Tunnels are rare and long, so each has a timer of
//! its own that looks at progress counters a few times per deadline. Between bursts a tunnel
//! holds no buffer (`copy`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, MissedTickBehavior};

use super::exchange::ClientDeadlines;
use super::http1::Upgraded;
use crate::http1::upgrade::PendingUpgrade;
use crate::metrics::Deadline;

mod copy;

/// Copies bytes both ways between the upgraded client and upstream connections until either
/// side closes or a deadline fires.
pub(crate) async fn tunnel(client: PendingUpgrade, upstream: Upgraded, deadlines: ClientDeadlines) {
    let client = match client.await {
        Ok(client) => client,
        Err(error) => {
            tracing::debug!(%error, "upgrade did not complete");
            return;
        }
    };
    let progress = Arc::new(Progress::default());
    let mut client = Watched::new(client, Side::Client, &progress);
    let mut upstream = Watched::new(upstream, Side::Upstream, &progress);
    let copying = copy::copy_both_ways(&mut client, &mut upstream);
    tokio::pin!(copying);
    let mut watch = TunnelWatch::new(&deadlines, Instant::now());
    let mut ticks = tokio::time::interval(watch.period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            copied = copying.as_mut() => {
                match copied {
                    Ok((sent, received)) => tracing::debug!(sent, received, "upgraded connection closed"),
                    Err(error) => tracing::debug!(%error, "upgraded connection failed"),
                }
                return;
            }
            _ = ticks.tick() => {
                if let Some(fired) = watch.check(&progress, Instant::now()) {
                    deadlines.counters.count(fired);
                    tracing::debug!(deadline = fired.kind(), "closing an upgraded connection");
                    return;
                }
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Side {
    Client,
    Upstream,
}

/// What the two copies have done, as the watch reads it.
#[derive(Default)]
struct Progress {
    /// Reads that brought bytes, and writes that took some, on either side.
    moved: AtomicU64,
    /// Per side: writes to it that went through, and whether the last one could not.
    written: [AtomicU64; 2],
    blocked: [AtomicBool; 2],
}

/// The tunnel's deadlines over its progress: a pure function of what it saw and `now`.
struct TunnelWatch {
    period: Duration,
    idle: Duration,
    send: Duration,
    seen_moved: u64,
    moved_at: Instant,
    seen_written: [u64; 2],
    written_at: [Instant; 2],
}

impl TunnelWatch {
    fn new(deadlines: &ClientDeadlines, now: Instant) -> TunnelWatch {
        let shortest = deadlines.tunnel_idle.min(deadlines.tunnel_send);
        TunnelWatch {
            period: (shortest / 4).max(Duration::from_millis(10)),
            idle: deadlines.tunnel_idle,
            send: deadlines.tunnel_send,
            seen_moved: 0,
            moved_at: now,
            seen_written: [0; 2],
            written_at: [now; 2],
        }
    }

    /// The deadline that fired by `now`, if one did.
    fn check(&mut self, progress: &Progress, now: Instant) -> Option<Deadline> {
        for side in [Side::Client, Side::Upstream] {
            let i = side as usize;
            let written = progress.written[i].load(Ordering::Relaxed);
            if !progress.blocked[i].load(Ordering::Relaxed) || written != self.seen_written[i] {
                self.seen_written[i] = written;
                self.written_at[i] = now;
            } else if now.duration_since(self.written_at[i]) >= self.send {
                return Some(Deadline::TunnelSend);
            }
        }
        let moved = progress.moved.load(Ordering::Relaxed);
        if moved != self.seen_moved {
            self.seen_moved = moved;
            self.moved_at = now;
        } else if now.duration_since(self.moved_at) >= self.idle {
            return Some(Deadline::TunnelIdle);
        }
        None
    }
}

/// One side of the tunnel, counting what goes through it.
struct Watched<S> {
    inner: S,
    side: usize,
    progress: Arc<Progress>,
}

impl<S> Watched<S> {
    fn new(inner: S, side: Side, progress: &Arc<Progress>) -> Watched<S> {
        Watched {
            inner,
            side: side as usize,
            progress: progress.clone(),
        }
    }

    fn note_write(&self, result: &Poll<std::io::Result<usize>>) {
        match result {
            Poll::Ready(Ok(_)) => {
                self.progress.moved.fetch_add(1, Ordering::Relaxed);
                self.progress.written[self.side].fetch_add(1, Ordering::Relaxed);
                self.progress.blocked[self.side].store(false, Ordering::Relaxed);
            }
            Poll::Pending => self.progress.blocked[self.side].store(true, Ordering::Relaxed),
            Poll::Ready(Err(_)) => {}
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.progress.moved.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(&result);
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        match result {
            Poll::Ready(Ok(())) => self.progress.blocked[self.side].store(false, Ordering::Relaxed),
            Poll::Pending => self.progress.blocked[self.side].store(true, Ordering::Relaxed),
            Poll::Ready(Err(_)) => {}
        }
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlines() -> ClientDeadlines {
        ClientDeadlines {
            tunnel_idle: Duration::from_secs(60),
            tunnel_send: Duration::from_secs(10),
            ..ClientDeadlines::default()
        }
    }

    #[test]
    fn a_tunnel_with_no_bytes_either_way_is_cut_at_the_idle_deadline() {
        let start = Instant::now();
        let mut watch = TunnelWatch::new(&deadlines(), start);
        let progress = Progress::default();
        assert_eq!(
            watch.check(&progress, start + Duration::from_secs(59)),
            None
        );
        progress.moved.fetch_add(1, Ordering::Relaxed);
        assert_eq!(
            watch.check(&progress, start + Duration::from_secs(70)),
            None
        );
        let at = start + Duration::from_secs(129);
        assert_eq!(watch.check(&progress, at), None);
        let at = start + Duration::from_secs(130);
        assert_eq!(watch.check(&progress, at), Some(Deadline::TunnelIdle));
    }

    #[test]
    fn a_side_that_takes_nothing_is_cut_at_the_send_deadline_and_progress_restarts_it() {
        let start = Instant::now();
        let mut watch = TunnelWatch::new(&deadlines(), start);
        let progress = Progress::default();
        let client = Side::Client as usize;
        progress.blocked[client].store(true, Ordering::Relaxed);
        // Bytes still arrive from the upstream: the tunnel is not idle, but the client is
        // not reading.
        let mut at = start;
        for _ in 0..9 {
            at += Duration::from_secs(1);
            progress.moved.fetch_add(1, Ordering::Relaxed);
            assert_eq!(watch.check(&progress, at), None);
        }
        // A write goes through: the wait starts again.
        progress.written[client].fetch_add(1, Ordering::Relaxed);
        at += Duration::from_secs(1);
        assert_eq!(watch.check(&progress, at), None);
        assert_eq!(watch.check(&progress, at + Duration::from_secs(9)), None);
        let fired = watch.check(&progress, at + Duration::from_secs(10));
        assert_eq!(fired, Some(Deadline::TunnelSend));
    }
}
