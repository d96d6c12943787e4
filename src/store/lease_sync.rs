//! The lease sync's Redis side (`lua/lease_sync.lua`): one `EVALSHA` for every identity
//! window a gateway touched, written as binary numbers like the limit script's call, and its
//! reply read back. The limiter's side (what to give back, keep and ask) is `limit::lease`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::pipe::{self, Reply};
use super::redis::{RedisStore, StoreError};
use super::script::push_identity_key;
use crate::clock::Nanos;
use crate::limit::lease::{Grant, SyncAsk};
use crate::limit::{Algorithm, Rate};

pub const LEASE_SYNC: &str = include_str!("lua/lease_sync.lua");

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEASE_SYNC));

/// One identity window in a sync: where its count lives and what its lease asks.
#[derive(Debug, Clone)]
pub struct SyncEntry<'a> {
    pub limit: &'a str,
    pub limit_identity: u128,
    /// The window's place among its limit's rates (its slot in the key).
    pub slot: usize,
    pub algorithm: Algorithm,
    pub rate: Rate,
    pub ask: SyncAsk,
}

/// What a sync answered: Redis's clock, the live instances, and a grant per entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncReply {
    /// Redis's time at the sync, in nanoseconds since the epoch (µs resolution).
    pub now: Nanos,
    pub instances: u64,
    pub grants: Vec<Grant>,
}

/// A sync's `EVALSHA` (or `EVAL` with the script's text, `with_text`), written whole.
struct SyncCall<'a> {
    key_prefix: &'a str,
    instance: &'a str,
    live_for: Duration,
    entries: &'a [SyncEntry<'a>],
    now: Option<Nanos>,
}

impl SyncCall<'_> {
    fn instances_key(&self) -> Vec<u8> {
        format!("{}instances", self.key_prefix).into_bytes()
    }

    /// Every identity key, each once, and each entry's key index (from 2: 1 is the set).
    fn keys(&self) -> (Vec<Vec<u8>>, Vec<usize>) {
        let mut keys = vec![self.instances_key()];
        let mut indices = Vec::with_capacity(self.entries.len());
        for entry in self.entries {
            let mut key = Vec::new();
            push_identity_key(&mut key, self.key_prefix, entry.limit, entry.limit_identity);
            let index = keys.iter().position(|k| *k == key).unwrap_or_else(|| {
                keys.push(key);
                keys.len() - 1
            });
            indices.push(index + 1);
        }
        (keys, indices)
    }

    fn write(&self, out: &mut Vec<u8>) {
        let (keys, indices) = self.keys();
        let mut numbers = Vec::with_capacity(self.entries.len() * 9 * 8);
        for (entry, index) in self.entries.iter().zip(indices) {
            let ask = &entry.ask;
            let code = if entry.algorithm == Algorithm::FixedWindow {
                4
            } else {
                3
            };
            let values = [
                code,
                index as u64,
                entry.slot as u64,
                entry.rate.limit,
                (entry.rate.per_ns() / 1000).max(1),
                ask.window,
                ask.give,
                ask.keep,
                u64::from(ask.want),
            ];
            for value in values {
                numbers.extend_from_slice(&(value as f64).to_le_bytes());
            }
        }
        let mut command = pipe::Command::new(out, 3 + keys.len() + 4);
        command.arg(b"EVALSHA").arg(SCRIPT.get_hash().as_bytes());
        command.arg(itoa::Buffer::new().format(keys.len()).as_bytes());
        for key in &keys {
            command.arg(key);
        }
        let now = self
            .now
            .map(|ns| (ns / 1000).to_string())
            .unwrap_or_default();
        let live_us = u64::try_from(self.live_for.as_micros()).unwrap_or(u64::MAX);
        command
            .arg(now.as_bytes())
            .arg(self.instance.as_bytes())
            .arg(itoa::Buffer::new().format(live_us).as_bytes())
            .arg(&numbers);
    }
}

impl RedisStore {
    /// Syncs `entries` in one call; `instance` is this gateway's id, live in the fleet for
    /// `live_for` after this call. `now` for tests; None is Redis's clock. A Redis that lost
    /// the script (restarted, flushed) is sent it and asked once more.
    pub async fn sync_leases(
        &self,
        instance: &str,
        live_for: Duration,
        entries: &[SyncEntry<'_>],
        now: Option<Nanos>,
    ) -> Result<SyncReply, StoreError> {
        let call = SyncCall {
            key_prefix: &self.config().key_prefix,
            instance,
            live_for,
            entries,
            now,
        };
        let key = call.instances_key();
        let write = |out: &mut Vec<u8>| call.write(out);
        let reply = match self.command(&key, &write).await {
            Err(StoreError::Server(error)) if error.starts_with("NOSCRIPT") => {
                let load = |out: &mut Vec<u8>| {
                    pipe::Command::new(out, 3)
                        .arg(b"SCRIPT")
                        .arg(b"LOAD")
                        .arg(LEASE_SYNC.as_bytes());
                };
                self.command(&key, &load).await?;
                self.command(&key, &write).await?
            }
            reply => reply?,
        };
        parse_reply(reply, entries.len())
    }
}

fn parse_reply(reply: Reply, entries: usize) -> Result<SyncReply, StoreError> {
    let Reply::Bulk(bytes) = reply else {
        return Err(StoreError::Protocol(format!("unexpected reply {reply:?}")));
    };
    if bytes.len() != 16 + 32 * entries {
        return Err(StoreError::Protocol(format!(
            "{} bytes for {entries} lease entries",
            bytes.len()
        )));
    }
    let numbers: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|chunk| {
            let mut double = [0; 8];
            double.copy_from_slice(chunk);
            let number = f64::from_le_bytes(double);
            (number >= 0.0 && number < super::redis::EXACT_LIMIT as f64)
                .then_some(number as u64)
                .ok_or_else(|| StoreError::Protocol(format!("{number} is not a count")))
        })
        .collect::<Result<_, _>>()?;
    let grants = numbers[2..]
        .chunks_exact(4)
        .map(|n| Grant {
            granted: n[0],
            window: n[1],
            prev: n[2],
            curr: n[3],
        })
        .collect();
    Ok(SyncReply {
        now: numbers[0].saturating_mul(1000),
        instances: numbers[1].max(1),
        grants,
    })
}

#[cfg(test)]
mod tests;
