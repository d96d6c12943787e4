//! The one script call a request makes: the Lua source, how a request's windows are written
//! into an `EVALSHA` (the keys of their limit identities, eleven numbers per window) and how
//! the reply (four numbers per window) is read back. Shared by a node and a cluster.

use std::time::Duration;

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::error::{ProtocolError, StoreError};
use super::pipe;
use super::slot;
use crate::limit::window::{Small, WindowRequest};
use crate::limit::{Algorithm, WindowCheck};
use crate::rt::clock::Nanos;

/// Lua numbers are doubles: integers are exact below 2^53.
pub(crate) const EXACT_LIMIT: u64 = 1 << 53;

/// The most windows one request may be checked against (config refuses routes whose limits
/// have more): the script unpacks every window's eleven numbers in one call, and Redis's Lua
/// holds about 8000 values on its C stack.
pub(crate) const MAX_WINDOWS: usize = 256;

/// Every algorithm's script, compiled into the one script a request calls, so a request that
/// meets limits of different algorithms still makes one atomic call.
pub const SCRIPT: &str = concat!(
    include_str!("lua/common.lua"),
    include_str!("lua/token_bucket.lua"),
    include_str!("lua/gcra.lua"),
    include_str!("lua/fixed_window.lua"),
    include_str!("lua/sliding_window.lua"),
    include_str!("lua/sliding_log.lua"),
    include_str!("lua/check.lua"),
);

/// Appends the key of a limit identity (`limit` is the limit's name), which holds its
/// windows; a sliding log's window adds `:{window}` for a sorted set of its own.
pub(super) fn push_identity_key(
    key: &mut Vec<u8>,
    key_prefix: &str,
    limit: &str,
    limit_identity: u128,
) {
    key.extend_from_slice(key_prefix.as_bytes());
    key.extend_from_slice(limit.as_bytes());
    key.extend_from_slice(b":{");
    push_identity(key, limit_identity);
    key.push(b'}');
}

/// The first key `call` names: a cluster routes the call by its slot (all of a call's keys
/// share their identity's hash tag).
pub(super) fn first_key(call: &ScriptCall) -> Vec<u8> {
    let mut key = Vec::new();
    if let (Some(request), Some(limit)) = (call.requests.first(), call.limits.first()) {
        push_identity_key(&mut key, call.key_prefix, limit, request.limit_identity);
    }
    key
}

/// One request's script call: its windows (`limits` names each one's limit), the script
/// `sha` and the keys' prefix; `now` for tests, None for Redis's clock.
pub struct ScriptCall<'a> {
    pub sha: &'a str,
    pub key_prefix: &'a str,
    pub requests: &'a [WindowRequest],
    pub limits: &'a [&'a str],
    pub now: Option<Nanos>,
}

/// Requests merged into one script call: the windows of every request added, in turn, with
/// the keys they name each written once (a hot key is read and written once for the whole
/// call), then written out as one `EVALSHA`. The script answers with every window's numbers
/// in the same order, so each request's are the next `REPLY_BYTES_PER_WINDOW` per window of
/// the reply.
#[derive(Default)]
pub struct Batch {
    sha: String,
    /// The `now` every request added was made with (tests give one; None is Redis's clock).
    now: Option<Nanos>,
    /// Every key's bytes, back to back; `key_ends[k]` is where key `k` ends.
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    /// Each key's index, found by its bytes.
    key_index: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
    parameters: Vec<u8>,
    /// A little-endian double per request: how many windows are its.
    window_counts: Vec<u8>,
    windows: usize,
    /// Where a key is written before it is looked up.
    key: Vec<u8>,
}

/// The reply's bytes for each window: four doubles.
pub(super) const REPLY_BYTES_PER_WINDOW: usize = 4 * 8;

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.window_counts.is_empty()
    }

    /// Whether `call` can join this one: one script and one `now` for all, and at most
    /// `MAX_WINDOWS` together (the script unpacks them all at once).
    pub fn fits(&self, call: &ScriptCall) -> bool {
        self.is_empty()
            || (self.now == call.now
                && self.windows + call.requests.len() <= MAX_WINDOWS
                && self.sha == call.sha)
    }

    /// Adds `call`'s windows. The caller checks `fits` first.
    pub fn add(&mut self, call: &ScriptCall) {
        let ScriptCall {
            sha,
            key_prefix,
            requests,
            limits,
            now,
        } = *call;
        if self.is_empty() {
            self.sha.clear();
            self.sha.push_str(sha);
            self.now = now;
        }
        let mut key = std::mem::take(&mut self.key);
        let mut key_index = 0;
        for (i, (request, &limit)) in requests.iter().zip(limits).enumerate() {
            if starts_key(requests, limits, i) {
                key.clear();
                push_identity_key(&mut key, key_prefix, limit, request.limit_identity);
                if request.algorithm == Algorithm::SlidingLog {
                    key.push(b':');
                    key.extend_from_slice(itoa::Buffer::new().format(request.window).as_bytes());
                }
                key_index = self.index_of(&key) + 1;
            }
            push_window_parameters(&mut self.parameters, request, key_index);
        }
        self.key = key;
        self.windows += requests.len();
        self.window_counts
            .extend_from_slice(&(requests.len() as f64).to_le_bytes());
    }

    /// The index of `key` among the call's keys, added when it is new.
    fn index_of(&mut self, key: &[u8]) -> usize {
        let hash = self.hasher.hash_one(key);
        let (keys, ends) = (&self.keys, &self.key_ends);
        let bytes_of =
            |index: usize| &keys[index.checked_sub(1).map_or(0, |i| ends[i])..ends[index]];
        if let Some(&index) = self.key_index.find(hash, |&index| bytes_of(index) == key) {
            return index;
        }
        let index = self.key_ends.len();
        self.keys.extend_from_slice(key);
        self.key_ends.push(self.keys.len());
        let (keys, ends, hasher) = (&self.keys, &self.key_ends, &self.hasher);
        self.key_index.insert_unique(hash, index, |&index| {
            let start = index.checked_sub(1).map_or(0, |i| ends[i]);
            hasher.hash_one(&keys[start..ends[index]])
        });
        index
    }

    /// How many arguments `write` writes.
    pub fn arguments(&self) -> usize {
        self.key_ends.len() + 6
    }

    /// Writes the `EVALSHA` of everything added (`arguments` of them) and empties the batch.
    pub fn write(&mut self, command: &mut impl Arguments) {
        command.push(b"EVALSHA");
        command.push(self.sha.as_bytes());
        self.write_keys(command);
        match self.now {
            Some(ns) => command.push(itoa::Buffer::new().format(ns / 1000).as_bytes()),
            None => command.push(b""),
        };
        command.push(&self.parameters);
        command.push(&self.window_counts);
        self.clear();
    }

    /// Writes the `EVAL` that checks everything added and writes nothing (`peek`), with the
    /// script's text: the admin endpoints call it rarely, and so never meet `NOSCRIPT`.
    pub fn write_peek(&mut self, command: &mut impl Arguments) {
        command.push(b"EVAL");
        command.push(SCRIPT.as_bytes());
        self.write_keys(command);
        command.push(b"");
        command.push(&self.parameters);
        command.push(&self.window_counts);
        command.push(b"peek");
        self.clear();
    }

    /// Writes how many keys were added, then each (an `EVAL`'s `numkeys` and keys): the
    /// settle script names its windows' keys as the check script does.
    pub(super) fn write_keys(&self, command: &mut impl Arguments) {
        command.push(itoa::Buffer::new().format(self.key_ends.len()).as_bytes());
        let mut start = 0;
        for &end in &self.key_ends {
            command.push(&self.keys[start..end]);
            start = end;
        }
    }

    /// How many keys were added.
    pub(super) fn keys(&self) -> usize {
        self.key_ends.len()
    }

    /// Every window's eleven numbers, as added.
    pub(super) fn parameters(&self) -> &[u8] {
        &self.parameters
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.key_ends.clear();
        self.key_index.clear();
        self.parameters.clear();
        self.window_counts.clear();
        self.windows = 0;
    }
}

/// Every key `call`'s windows are stored under (the identities' keys, and each sliding log
/// window's), each once: what forgetting them deletes.
pub(super) fn keys_of(call: &ScriptCall) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for (request, &limit) in call.requests.iter().zip(call.limits) {
        let mut key = Vec::new();
        push_identity_key(&mut key, call.key_prefix, limit, request.limit_identity);
        if request.algorithm == Algorithm::SlidingLog {
            key.push(b':');
            key.extend_from_slice(itoa::Buffer::new().format(request.window).as_bytes());
        }
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// Whether window `i` starts a key: the windows of one limit identity (adjacent) share one,
/// but each sliding log's window is a sorted set of its own.
fn starts_key(requests: &[WindowRequest], limits: &[&str], i: usize) -> bool {
    i == 0
        || requests[i].algorithm == Algorithm::SlidingLog
        || requests[i].limit_identity != requests[i - 1].limit_identity
        || limits[i] != limits[i - 1]
}

/// Where a command's arguments go: the pipe's buffer (or a test's list).
pub trait Arguments {
    fn push(&mut self, argument: &[u8]);
}

impl pipe::Merge for Batch {
    type Call<'c> = ScriptCall<'c>;
    const SCRIPT: &'static str = SCRIPT;

    fn fits(&self, call: &ScriptCall<'_>) -> bool {
        Batch::fits(self, call)
    }

    fn add(&mut self, call: &ScriptCall<'_>) {
        Batch::add(self, call)
    }

    /// Four doubles per window.
    fn reply_bytes(call: &ScriptCall<'_>) -> usize {
        REPLY_BYTES_PER_WINDOW * call.requests.len()
    }

    fn arguments(&self) -> usize {
        Batch::arguments(self)
    }

    fn write(&mut self, command: &mut pipe::Command<'_>) {
        Batch::write(self, command)
    }

    fn clear(&mut self) {
        Batch::clear(self)
    }
}

impl Arguments for pipe::Command<'_> {
    fn push(&mut self, argument: &[u8]) {
        self.arg(argument);
    }
}

/// The 128-bit identity in 22 characters of URL-safe base64 (no `{` or `}`, so it can be the
/// key's hash tag): 10 bytes shorter than hex, in every key.
fn push_identity(key: &mut Vec<u8>, identity: u128) {
    key.extend_from_slice(&slot::identity_text(identity));
}

/// A window's eleven numbers, as `check.lua` reads them: little-endian doubles (exact, every
/// number being a whole number below 2^53 or, for an unbounded max_delay, merely huge), times
/// in whole microseconds; `key_index` is the window's key among the call's (from 1).
fn push_window_parameters(out: &mut Vec<u8>, request: &WindowRequest, key_index: usize) {
    let rate = &request.rate;
    let max_delay_us = u64::try_from(request.max_delay.as_micros()).unwrap_or(u64::MAX);
    let numbers = [
        u64::from(algorithm_code(request.algorithm)),
        request.group as u64,
        u64::from(request.shadow),
        rate.limit,
        (rate.per_ns() / 1000).max(1),
        (rate.emission_interval_ns() / 1000).max(1),
        rate.burst,
        request.cost,
        max_delay_us,
        key_index as u64,
        request.window as u64,
    ];
    // Gathered first: one append instead of eleven, each checking the vector's room.
    let mut bytes = [0u8; 8 * 11];
    for (slot, number) in bytes.chunks_exact_mut(8).zip(numbers) {
        slot.copy_from_slice(&(number as f64).to_le_bytes());
    }
    out.extend_from_slice(&bytes);
}

fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::TokenBucket => 1,
        Algorithm::Gcra => 2,
        Algorithm::SlidingWindow => 3,
        Algorithm::FixedWindow => 4,
        Algorithm::SlidingLog => 5,
    }
}

/// The script's reply: four little-endian doubles per window, each a whole number once
/// truncated toward zero (as Redis truncates a Lua number it returns as an integer).
pub(super) fn parse_reply(reply: &[u8], windows: usize) -> Result<Small<WindowCheck>, StoreError> {
    if reply.len() != windows * 4 * 8 {
        return Err(ProtocolError::Length {
            bytes: reply.len(),
            items: windows,
            of: "windows",
        }
        .into());
    }
    let count = |bytes: &[u8]| {
        let mut double = [0; 8];
        double.copy_from_slice(bytes);
        let number = f64::from_le_bytes(double);
        whole_count(number).ok_or(StoreError::Protocol(ProtocolError::NotACount(number)))
    };
    reply
        .chunks_exact(4 * 8)
        .map(|window| {
            let allowed = count(&window[..8])?;
            let remaining = count(&window[8..16])?;
            let (reset, wait) = (
                micros(count(&window[16..24])?),
                micros(count(&window[24..])?),
            );
            Ok(match allowed {
                1 => WindowCheck::Allow {
                    cell: [0, 0],
                    remaining,
                    reset,
                    delay: wait,
                },
                _ => WindowCheck::Deny {
                    retry_after: wait,
                    remaining,
                    reset,
                },
            })
        })
        .collect()
}

/// `number` truncated toward zero, when that is a count below `EXACT_LIMIT`. Compared before
/// truncating, as the cast then truncates: `f64::trunc` is a libm call on this target's
/// baseline (no SSE4.1), and a reply holds four counts a window.
fn whole_count(number: f64) -> Option<u64> {
    (number > -1.0 && number < EXACT_LIMIT as f64).then_some(number as u64)
}

fn micros(us: u64) -> Duration {
    Duration::from_micros(us)
}

#[cfg(test)]
mod tests;
