//! A shared store whose answers a test scripts, one per call: healthy (the windows checked
//! all-or-nothing by a memory store at the test's clock, as Redis checks them), down with an
//! error (a timeout, an open breaker), or down for some identities only (a cluster node).
//! It counts the calls it was asked, and records every settle (applied to its counts as
//! Redis would apply it, with no wait of its own).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::limit::WindowCheck;
use crate::limit::settle::{Adjustment, Reserved};
use crate::limit::window::{Small, WindowRequest};
use crate::rt::clock::{Clock, ManualClock};
use crate::store::denied::DeniedCache;
use crate::store::error::StoreError;
use crate::store::memory::MemoryStore;
use crate::store::redis::Outcome;
use crate::store::settle::ElapsedReservation;

/// How the store answers one call.
#[derive(Clone, Debug)]
pub enum Answer {
    /// Every window checked.
    Healthy,
    /// No window checked: the call failed.
    Down(StoreError),
    /// The windows of these limit identities failed (their node is down); the others were
    /// checked.
    DownFor(Vec<u128>, StoreError),
}

/// A settle the store was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The windows' limit identities, in order.
    pub identities: Vec<u128>,
    pub reserved: Vec<ElapsedReservation>,
    pub adjustment: Adjustment,
}

pub struct ScriptedStore {
    pub timeout: Duration,
    pub denied: DeniedCache,
    counted: MemoryStore,
    clock: ManualClock,
    /// The answers of the next calls, in order; `usual` once they run out.
    next: Mutex<VecDeque<Answer>>,
    usual: Mutex<Answer>,
    calls: AtomicUsize,
    settled: Mutex<Vec<Settled>>,
    /// What every settle answers from now on: None, settled.
    settle_error: Mutex<Option<StoreError>>,
}

impl ScriptedStore {
    /// A healthy store that counts at `clock`'s time.
    pub fn new(clock: ManualClock) -> ScriptedStore {
        ScriptedStore {
            timeout: Duration::from_millis(50),
            denied: DeniedCache::new(1000),
            counted: MemoryStore::new(10_000),
            clock,
            next: Mutex::new(VecDeque::new()),
            usual: Mutex::new(Answer::Healthy),
            calls: AtomicUsize::new(0),
            settled: Mutex::default(),
            settle_error: Mutex::default(),
        }
    }

    /// Every call from now on answers `answer` (after the queued ones).
    pub fn answer_always(&self, answer: Answer) {
        *lock(&self.usual) = answer;
    }

    /// The next call answers `answer`.
    pub fn answer_next(&self, answer: Answer) {
        lock(&self.next).push_back(answer);
    }

    /// How many check calls were made.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub(super) fn check_all(&self, requests: &[WindowRequest]) -> Outcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = lock(&self.next).pop_front();
        let answer = answer.unwrap_or_else(|| lock(&self.usual).clone());
        let down: &[u128] = match &answer {
            Answer::Healthy => &[],
            Answer::Down(_) => return failed(requests.len(), &answer),
            Answer::DownFor(identities, _) => identities,
        };
        let reached: Small<WindowRequest> = (requests.iter())
            .filter(|r| !down.contains(&r.limit_identity))
            .cloned()
            .collect();
        let mut checked = self
            .counted
            .check_all(&reached, self.clock.now())
            .into_iter();
        let checks = (requests.iter())
            .map(|r| match down.contains(&r.limit_identity) {
                true => None,
                false => checked.next(),
            })
            .collect();
        let error = match answer {
            Answer::DownFor(_, error) => Some(error),
            _ => None,
        };
        Outcome { checks, error }
    }

    /// Every settle asked for so far, in order (a failed one too).
    pub fn settled(&self) -> Vec<Settled> {
        lock(&self.settled).clone()
    }

    /// Every settle from now on fails with `error` (None: they succeed).
    pub fn settle_fails(&self, error: Option<StoreError>) {
        *lock(&self.settle_error) = error;
    }

    pub(super) fn settle(
        &self,
        requests: &[WindowRequest],
        reserved: &[ElapsedReservation],
        adjustment: Adjustment,
    ) -> Result<(), StoreError> {
        lock(&self.settled).push(Settled {
            identities: requests.iter().map(|r| r.limit_identity).collect(),
            reserved: reserved.to_vec(),
            adjustment,
        });
        if let Some(error) = lock(&self.settle_error).clone() {
            return Err(error);
        }
        let now = self.clock.now();
        let ago = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let reserved: Small<Reserved> = (reserved.iter())
            .map(|r| Reserved {
                earliest: now.saturating_sub(ago(r.since_sent)),
                latest: now.saturating_sub(ago(r.since_reply)),
                reset: r.reset,
            })
            .collect();
        self.counted.settle(requests, &reserved, adjustment, now);
        Ok(())
    }

    pub(super) fn tier(&self, _field: &[u8]) -> Option<Option<std::sync::Arc<str>>> {
        None
    }

    pub(super) fn peek(
        &self,
        requests: &[WindowRequest],
    ) -> Result<Small<WindowCheck>, StoreError> {
        Ok(self.counted.peek(requests, self.clock.now()))
    }

    pub(super) fn forget(&self, requests: &[WindowRequest]) -> Result<(), StoreError> {
        self.counted.forget(requests);
        Ok(())
    }
}

/// Every window of a call failed.
fn failed(windows: usize, answer: &Answer) -> Outcome {
    let error = match answer {
        Answer::Down(error) | Answer::DownFor(_, error) => Some(error.clone()),
        Answer::Healthy => None,
    };
    Outcome {
        checks: (0..windows).map(|_| None).collect(),
        error,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
