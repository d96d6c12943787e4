//! Settling reservations in Redis (`lua/settle.lua`): a request's windows adjusted by
//! `actual − reserve` in one script call per node (on a cluster, one per limit identity, as
//! the checks), on the keys the check script wrote. The rules are `limit::settle`'s.
//!
//! Redis' clock is not the gateway's: the gateway knows when it sent a reservation's check
//! and when the reply came, by its own `Instant`s, so it tells the script how long ago those
//! were, and the script places the reservation in its own time, widened by how long the
//! settle call itself may wait once written (`ElapsedReservation`). A call written again
//! (after `NOSCRIPT`, a redirection) is written with the times as of then.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::Script;

use super::error::ProtocolError;
use super::pipe::{self, Reply};
use super::redis::{RedisStore, StoreError, identity_spans};
use super::script::{self, Batch, MAX_WINDOWS, ScriptCall};
use crate::limit::settle::Adjustment;
use crate::limit::window::WindowRequest;
use crate::rt::clock::Nanos;

/// The settle script: the window layout of `common.lua`, then `settle.lua`.
pub const SETTLE_SCRIPT: &str = concat!(
    include_str!("lua/common.lua"),
    include_str!("lua/settle.lua")
);

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SETTLE_SCRIPT));

/// When one window's reservation was made, as the gateway saw it at settle time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElapsedReservation {
    /// How long ago the check call that reserved was sent.
    pub since_sent: Duration,
    /// How long ago its reply came (at most `since_sent`).
    pub since_reply: Duration,
    /// The window's reset in that reply (a bucket's: until it was full again).
    pub reset: Duration,
}

impl ElapsedReservation {
    /// A reservation whose check was sent at `sent` and answered at `replied`, as of `now`.
    pub fn between(sent: Instant, replied: Instant, reset: Duration, now: Instant) -> Self {
        ElapsedReservation {
            since_sent: now.saturating_duration_since(sent),
            since_reply: now.saturating_duration_since(replied.max(sent)),
            reset,
        }
    }

    /// The three doubles `settle.lua` reads, `late` after the reservation was measured (the
    /// call is written now), in whole µs, each rounded the way that widens the reservation's
    /// time (earlier earliest, later latest) and shortens its reset: a refund is then never
    /// given where the reservation may no longer count.
    fn numbers(&self, late: Duration) -> [f64; 3] {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let since_sent = self.since_sent.saturating_add(late);
        let sent = micros(since_sent.saturating_add(Duration::from_nanos(999)));
        let reply = micros(self.since_reply.saturating_add(late)).min(sent);
        [sent, reply, micros(self.reset)].map(|us| us.min(script::EXACT_LIMIT - 1) as f64)
    }
}

/// One settle call, written whole: its windows' keys and numbers as the check's (a `Batch` of
/// one request), then the adjustment and the reservations.
struct SettleCall<'a> {
    key_prefix: &'a str,
    requests: &'a [WindowRequest],
    limits: &'a [&'a str],
    reserved: &'a [ElapsedReservation],
    adjustment: Adjustment,
    /// How long the call may wait before Redis runs it, once written.
    wait: Duration,
    /// When the reservations' times were measured: a call written later (after `NOSCRIPT`,
    /// a redirection) moves them back by as much, so `wait` need cover only its own send.
    asked: Instant,
    now: Option<Nanos>,
}

impl SettleCall<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        let mut batch = Batch::default();
        batch.add(&ScriptCall {
            sha: SCRIPT.get_hash(),
            key_prefix: self.key_prefix,
            requests: self.requests,
            limits: self.limits,
            now: self.now,
        });
        let (kind, units) = match self.adjustment {
            Adjustment::Debt(units) => (&b"debt"[..], units),
            Adjustment::Refund(units) => (&b"refund"[..], units),
        };
        // An explicit `now` (tests) is the time the call runs at, however late it is sent.
        let late = match self.now {
            Some(_) => Duration::ZERO,
            None => self.asked.elapsed(),
        };
        let reservations: Vec<u8> = (self.reserved.iter())
            .flat_map(|reserved| reserved.numbers(late))
            .flat_map(f64::to_le_bytes)
            .collect();
        let mut command = pipe::Command::new(out, 3 + batch.keys() + 6);
        command.arg(b"EVALSHA").arg(SCRIPT.get_hash().as_bytes());
        batch.write_keys(&mut command);
        match self.now {
            Some(ns) => command.arg(itoa::Buffer::new().format(ns / 1000).as_bytes()),
            None => command.arg(b""),
        };
        command.arg(kind);
        // Lua's numbers are doubles: a larger amount is as good as unbounded to every window.
        let units = units.min(script::EXACT_LIMIT - 1);
        command.arg(itoa::Buffer::new().format(units).as_bytes());
        let wait_us = u64::try_from(self.wait.as_micros()).unwrap_or(u64::MAX);
        command.arg(
            itoa::Buffer::new()
                .format(wait_us.min(script::EXACT_LIMIT - 1))
                .as_bytes(),
        );
        command.arg(batch.parameters()).arg(&reservations);
    }

    /// The first window's key: a cluster routes the call by its slot.
    fn first_key(&self) -> Vec<u8> {
        script::first_key(&ScriptCall {
            sha: SCRIPT.get_hash(),
            key_prefix: self.key_prefix,
            requests: self.requests,
            limits: self.limits,
            now: self.now,
        })
    }
}

impl RedisStore {
    /// Settles a reservation of the windows `requests` (`limits[i]` names the limit of
    /// `requests[i]`, `reserved[i]` says when its reservation was made, measured just before
    /// this call) by `adjustment`.
    /// `now` is for tests that compare with the Rust rules; in service it is None and Redis'
    /// TIME decides. One call on a node; on a cluster one per limit identity, concurrently
    /// (each identity's keys share a slot), the first error returned once all have ended.
    /// A Redis that lost the script (restarted, flushed) is sent it and asked once more.
    pub async fn settle(
        &self,
        requests: &[WindowRequest],
        limits: &[&str],
        reserved: &[ElapsedReservation],
        adjustment: Adjustment,
        now: Option<Nanos>,
    ) -> Result<(), StoreError> {
        debug_assert!(
            requests.len() == limits.len() && requests.len() == reserved.len(),
            "a limit and a reservation per window"
        );
        let windows = requests.len().min(limits.len()).min(reserved.len());
        let (requests, limits, reserved) = (
            &requests[..windows],
            &limits[..windows],
            &reserved[..windows],
        );
        let spans = match self.cluster() {
            Some(_) => identity_spans(requests).into_vec(),
            // One call for all: at most `MAX_WINDOWS`, the config's bound, as a check's (the
            // script unpacks its keys and its reply at once).
            None => (0..requests.len())
                .step_by(MAX_WINDOWS)
                .map(|start| (start, (start + MAX_WINDOWS).min(requests.len())))
                .collect(),
        };
        let asked = Instant::now();
        let calls = spans.iter().map(|&(start, end)| {
            self.settle_span(SettleCall {
                key_prefix: &self.config().key_prefix,
                requests: &requests[start..end],
                limits: &limits[start..end],
                reserved: &reserved[start..end],
                adjustment,
                wait: self.config().longest_wait(),
                asked,
                now,
            })
        });
        join_all(calls).await.into_iter().collect()
    }

    /// One settle call, on the node of its first key.
    async fn settle_span(&self, call: SettleCall<'_>) -> Result<(), StoreError> {
        let write = |out: &mut Vec<u8>| call.write(out);
        let load = |out: &mut Vec<u8>| {
            pipe::Command::new(out, 3)
                .arg(b"SCRIPT")
                .arg(b"LOAD")
                .arg(SETTLE_SCRIPT.as_bytes());
        };
        let reply = self
            .script_command(&call.first_key(), &write, &load)
            .await?;
        parse_reply(reply, call.requests.len())
    }
}

/// The script's reply: a double per window, 1 (adjusted) or 0 (not).
pub(super) fn parse_reply(reply: Reply, windows: usize) -> Result<(), StoreError> {
    let Reply::Bulk(bytes) = reply else {
        return Err(ProtocolError::Unexpected {
            expected: "a bulk string",
            got: reply.kind(),
        }
        .into());
    };
    if bytes.len() != 8 * windows {
        return Err(ProtocolError::Length {
            bytes: bytes.len(),
            items: windows,
            of: "settled windows",
        }
        .into());
    }
    for chunk in bytes.chunks_exact(8) {
        let mut double = [0; 8];
        double.copy_from_slice(chunk);
        let number = f64::from_le_bytes(double);
        if number != 0.0 && number != 1.0 {
            return Err(ProtocolError::NotACount(number).into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
