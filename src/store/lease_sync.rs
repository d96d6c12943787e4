//! The lease sync's Redis side (`lua/lease_sync.lua`): one `EVALSHA` for every identity
//! window a gateway touched, written as binary numbers like the limit script's call, and its
//! reply read back. The limiter's side (what to give back, keep and ask) is `limit::lease`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::error::ProtocolError;
use super::pipe::{self, Reply};
use super::redis::{RedisStore, StoreError};
use super::script::push_identity_key;
use crate::limit::lease::{Grant, SyncAsk};
use crate::limit::{Algorithm, Rate};
use crate::rt::clock::Nanos;

pub(crate) const LEASE_SYNC: &str = include_str!("lua/lease_sync.lua");

/// On a cluster the same text behind a flag that lets it touch every slot of the node called
/// (Redis >= 7.0; see the script's header).
pub(crate) const CLUSTER_FLAGS: &str = "#!lua flags=allow-cross-slot-keys\n";

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(LEASE_SYNC));
static CLUSTER_TEXT: LazyLock<String> = LazyLock::new(|| format!("{CLUSTER_FLAGS}{LEASE_SYNC}"));
static CLUSTER_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(&CLUSTER_TEXT));

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

/// How a sync's call runs: on one node, or on one master of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Every key in KEYS, the instances' set first.
    Node,
    /// No KEYS, every key in ARGV (the flagged script). `None`: this node holds the instances'
    /// set and records the gateway; `Some(n)`: another does, share among `n`.
    Cluster(Option<u64>),
}

/// A sync's `EVALSHA`, written whole.
pub(super) struct SyncCall<'a> {
    pub(super) key_prefix: &'a str,
    pub(super) instance: &'a str,
    pub(super) live_for: Duration,
    pub(super) entries: &'a [SyncEntry<'a>],
    pub(super) now: Option<Nanos>,
    pub(super) mode: Mode,
}

/// The key of the fleet's live instances' sorted set.
pub(super) fn instances_key(key_prefix: &str) -> Vec<u8> {
    format!("{key_prefix}instances").into_bytes()
}

impl SyncCall<'_> {
    fn instances_key(&self) -> Vec<u8> {
        instances_key(self.key_prefix)
    }

    fn records(&self) -> bool {
        matches!(self.mode, Mode::Node | Mode::Cluster(None))
    }

    /// Every key, each once, and each entry's key index (from 1; the set is first when this
    /// call records the gateway).
    fn keys(&self) -> (Vec<Vec<u8>>, Vec<usize>) {
        let mut keys = Vec::new();
        if self.records() {
            keys.push(self.instances_key());
        }
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
        let now = self
            .now
            .map(|ns| (ns / 1000).to_string())
            .unwrap_or_default();
        let live_us = u64::try_from(self.live_for.as_micros()).unwrap_or(u64::MAX);
        let live_us = itoa::Buffer::new().format(live_us).as_bytes().to_vec();
        let Mode::Cluster(shared_by) = self.mode else {
            let mut command = pipe::Command::new(out, 3 + keys.len() + 4);
            command.arg(b"EVALSHA").arg(SCRIPT.get_hash().as_bytes());
            command.arg(itoa::Buffer::new().format(keys.len()).as_bytes());
            for key in &keys {
                command.arg(key);
            }
            command.arg(now.as_bytes()).arg(self.instance.as_bytes());
            command.arg(&live_us).arg(&numbers);
            return;
        };
        let instance = if shared_by.is_none() {
            self.instance.as_bytes()
        } else {
            b""
        };
        let shared_by = itoa::Buffer::new()
            .format(shared_by.unwrap_or(1))
            .as_bytes()
            .to_vec();
        let mut command = pipe::Command::new(out, 3 + 5 + keys.len());
        command
            .arg(b"EVALSHA")
            .arg(CLUSTER_SCRIPT.get_hash().as_bytes());
        command.arg(b"0").arg(now.as_bytes()).arg(instance);
        command.arg(&live_us).arg(&numbers).arg(&shared_by);
        for key in &keys {
            command.arg(key);
        }
    }

    /// The script's text, to load it where it is missing.
    pub(super) fn text(&self) -> &'static str {
        match self.mode {
            Mode::Node => LEASE_SYNC,
            Mode::Cluster(_) => CLUSTER_TEXT.as_str(),
        }
    }

    /// Writes the call (for a pipe's `call`).
    pub(super) fn writer(&self) -> impl Fn(&mut Vec<u8>) + Sync + '_ {
        |out: &mut Vec<u8>| self.write(out)
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
            mode: Mode::Node,
        };
        let key = call.instances_key();
        let write = call.writer();
        let load = |out: &mut Vec<u8>| {
            pipe::Command::new(out, 3)
                .arg(b"SCRIPT")
                .arg(b"LOAD")
                .arg(LEASE_SYNC.as_bytes());
        };
        let reply = self.script_command(&key, &write, &load).await?;
        parse_reply(reply, entries.len())
    }
}

pub(super) fn parse_reply(reply: Reply, entries: usize) -> Result<SyncReply, StoreError> {
    let Reply::Bulk(bytes) = reply else {
        return Err(ProtocolError::Unexpected {
            expected: "a bulk string",
            got: reply.kind(),
        }
        .into());
    };
    if bytes.len() != 16 + 32 * entries {
        return Err(ProtocolError::Length {
            bytes: bytes.len(),
            items: entries,
            of: "lease entries",
        }
        .into());
    }
    let numbers: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|chunk| {
            let mut double = [0; 8];
            double.copy_from_slice(chunk);
            let number = f64::from_le_bytes(double);
            (number >= 0.0 && number < super::redis::EXACT_LIMIT as f64)
                .then_some(number as u64)
                .ok_or(StoreError::Protocol(ProtocolError::NotACount(number)))
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

mod cluster;
#[cfg(test)]
mod tests;
