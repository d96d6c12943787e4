//! What is known of each server's health, and the active checks that learn it: every
//! `interval`, GET `path` on each server of an upstream; a 2xx within `timeout` passes.
//! Verdicts change only after a streak (see `ServerHealth::record_check`). A server's record
//! outlives the runtime that made it: reloads hand it on while the server's definition holds.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::HealthCheck;

/// One server's health: the verdict of its active checks with the streak towards changing it,
/// and its ejection after a refused connection. Shared by the pools of successive runtimes
/// while the server's definition is unchanged (see `UpstreamPool::succeeding`), so a reload
/// neither puts a down server back in rotation nor restarts its streak. Its times count from
/// its own epoch, which stays with it from runtime to runtime.
#[derive(Debug)]
pub(crate) struct ServerHealth {
    passes_checks: AtomicBool,
    check_streak: AtomicU32,
    /// Milliseconds since `epoch` until which the server is left out; 0: it is not.
    ejected_until_ms: AtomicU64,
    /// When a check of it was last recorded, in milliseconds since `epoch` plus one; 0: never.
    checked_at_ms: AtomicU64,
    epoch: Instant,
}

impl Default for ServerHealth {
    /// A server nothing is known of yet: trusted until checks or a refusal say otherwise.
    fn default() -> ServerHealth {
        ServerHealth {
            passes_checks: AtomicBool::new(true),
            check_streak: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            checked_at_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl ServerHealth {
    /// Leaves the server out for `time` from now.
    pub(crate) fn eject(&self, time: Duration) {
        let until = self.now_ms() + time.as_millis() as u64;
        self.ejected_until_ms.store(until, Ordering::Relaxed);
    }

    /// Feeds one active check result; returns the new verdict when it changed.
    pub(crate) fn record_check(&self, passed: bool, check: &HealthCheck) -> Option<bool> {
        self.checked_at_ms
            .store(self.now_ms() + 1, Ordering::Relaxed);
        let currently_up = self.passes_checks.load(Ordering::Relaxed);
        if passed == currently_up {
            self.check_streak.store(0, Ordering::Relaxed);
            return None;
        }
        let streak = self.check_streak.fetch_add(1, Ordering::Relaxed) + 1;
        let needed = if passed {
            check.healthy_threshold
        } else {
            check.unhealthy_threshold
        };
        if streak < needed {
            return None;
        }
        self.check_streak.store(0, Ordering::Relaxed);
        self.passes_checks.store(passed, Ordering::Relaxed);
        if passed {
            // A server that passes checks again is trusted again at once.
            self.ejected_until_ms.store(0, Ordering::Relaxed);
        }
        Some(passed)
    }

    /// True when the server may take traffic now (passes checks, not ejected). The clock is
    /// read only for a server that was ejected (0: never, or trusted again): a clock read on
    /// every pick would be one more on every proxied request.
    pub(crate) fn is_available_now(&self) -> bool {
        let ejected_until_ms = self.ejected_until_ms.load(Ordering::Relaxed);
        self.passes_checks.load(Ordering::Relaxed)
            && (ejected_until_ms == 0 || ejected_until_ms <= self.now_ms())
    }

    /// When a check of the server was last recorded, if ever.
    pub(crate) fn checked_at(&self) -> Option<Instant> {
        let stamp = self.checked_at_ms.load(Ordering::Relaxed);
        let since_epoch = Duration::from_millis(stamp.checked_sub(1)?);
        Some(self.epoch + since_epoch)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}
