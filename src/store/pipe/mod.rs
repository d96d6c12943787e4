//! A Redis connection that belongs to one serving worker. Its callers append their commands
//! to one buffer and wait for their replies, which Redis sends back in the order the commands
//! came; one driver task on the worker's event loop writes the buffer out and reads the
//! replies in. Beside the redis crate's multiplexed connection, a call makes no channel hop
//! and no allocation, arms no timer of its own (the driver keeps one for every call it
//! waits on) and its reply is cut out of the read buffer, not built as a tree of values.
//! TCP, plain or TLS. `calls` keeps the calls in the order of their commands; `driver` writes,
//! reads and times them out.
//!
//! The mergeable calls queued before the driver next writes (made in one turn of the worker's
//! event loop, or while it is still writing: under load, many) are merged into one command
//! (`Merge`; the limit script's calls are `script::Batch`): Redis runs it once for all of
//! them, each call's answer a piece of the one reply. The pipe knows nothing of the script.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use rustls::pki_types::ServerName;
use tokio::time::Instant;

use super::error::{ConnectionError, ReplyKind, StoreError};
use calls::{Call, CallState, Pending, Piece, State};
use driver::Connection;

mod calls;
mod driver;

/// Calls waiting on one connection beyond which new ones fail at once: a stalled Redis
/// with requests arriving faster than the breaker opens must not grow memory without bound.
const MOST_WAITING: usize = 10_000;
const READ_CHUNK: usize = 16 * 1024;
/// A connection that owes replies and has answered nothing for this long past the timeout is
/// given up and the next call connects again: Redis gone without a FIN (a partition, a
/// failed-over address) would otherwise hold every call until TCP gives up, many minutes later.
const STALLED_FOR: Duration = Duration::from_secs(2);

/// Where to connect and how to open a session there.
#[derive(Clone)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    /// Never logged or put in an error.
    pub password: Option<String>,
    pub db: i64,
    pub connect_timeout: Duration,
    /// How long Redis may keep a call waiting once it could have started on it: from when
    /// the call was queued, the connection opened or Redis last answered anything on it,
    /// whichever is latest. Time a call spends behind the gateway's own earlier calls while
    /// Redis answers them is not Redis failing, so it does not count.
    pub timeout: Duration,
    /// For `rediss://`.
    pub tls: Option<Tls>,
    /// Whether script calls queued together are merged into one `EVALSHA` (one node); a
    /// cluster's are not, as their keys may live in different slots.
    pub merge: bool,
}

impl Settings {
    /// `host:port`, as logs and metrics name the node.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[derive(Clone)]
pub struct Tls {
    pub config: Arc<rustls::ClientConfig>,
    /// The name the server's certificate must hold: the URL's host.
    pub name: ServerName<'static>,
}

/// What Redis answered; an error reply is `StoreError::Server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Nil,
    Status(Bytes),
    Integer(i64),
    Bulk(Bytes),
    /// An array (e.g. `CLUSTER SLOTS`), as its whole frame: see `resp::tree`.
    Array(Bytes),
}

impl Reply {
    /// What kind of reply it is, for an error saying it was not the one expected.
    pub fn kind(&self) -> ReplyKind {
        match self {
            Reply::Nil => ReplyKind::Nil,
            Reply::Status(_) => ReplyKind::Status,
            Reply::Integer(_) => ReplyKind::Integer,
            Reply::Bulk(_) => ReplyKind::Bulk,
            Reply::Array(_) => ReplyKind::Array,
        }
    }
}

/// One command being written: RESP's array of bulk strings, its length given up front.
pub struct Command<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Command<'a> {
    pub fn new(out: &'a mut Vec<u8>, arguments: usize) -> Command<'a> {
        out.push(b'*');
        out.extend_from_slice(itoa::Buffer::new().format(arguments).as_bytes());
        out.extend_from_slice(b"\r\n");
        Command { out }
    }

    pub fn arg(&mut self, bytes: &[u8]) -> &mut Self {
        self.out.push(b'$');
        self.out
            .extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(bytes);
        self.out.extend_from_slice(b"\r\n");
        self
    }
}

/// Calls a pipe merges into one command when they are queued together, each taking its piece
/// of the command's one bulk reply. The command runs a script: a Redis that answers
/// `NOSCRIPT` (restarted, flushed) is sent `SCRIPT` to load and the calls are retried once.
pub trait Merge: Default + Send + 'static {
    /// One call, as its caller hands it over.
    type Call<'c>;
    /// The source of the script the merged command runs.
    const SCRIPT: &'static str;
    /// Whether `call` can join the calls merged so far.
    fn fits(&self, call: &Self::Call<'_>) -> bool;
    /// Adds `call`; the pipe checks `fits` first.
    fn add(&mut self, call: &Self::Call<'_>);
    /// How many bytes of the reply are `call`'s.
    fn reply_bytes(call: &Self::Call<'_>) -> usize;
    /// How many arguments `write` writes.
    fn arguments(&self) -> usize;
    /// Writes the merged command's arguments and empties the batch.
    fn write(&mut self, command: &mut Command<'_>);
    /// Forgets what was added (its connection was lost).
    fn clear(&mut self);
}

pub struct Pipe<M> {
    shared: Arc<Shared<M>>,
}

struct Shared<M> {
    settings: Settings,
    state: Mutex<State<M>>,
}

impl<M: Merge> Pipe<M> {
    /// Connects on the first call, from the event loop that makes it.
    pub fn new(settings: Settings) -> Pipe<M> {
        Pipe {
            shared: Arc::new(Shared {
                settings,
                state: Mutex::new(State {
                    queued: Vec::with_capacity(READ_CHUNK),
                    batch: M::default(),
                    merged: 0,
                    script_loads: 0,
                    calls: VecDeque::new(),
                    first: 0,
                    unanswered: 0,
                    progress_at: None,
                    sent_end: 0,
                    driver_running: false,
                    driver: None,
                    timer_armed: false,
                    closed: false,
                }),
            }),
        }
    }

    /// Sends the command `write` appends (see `Command`) and waits for its reply, `wait` at
    /// most (see `Settings::timeout` for when it times out sooner). The first call starts the
    /// driver on its own tokio event loop.
    pub async fn call(
        &self,
        wait: Duration,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Reply, StoreError> {
        self.call_with(wait, false, write).await
    }

    /// `call`, right after `ASKING` when `asking` (see `call_merged_asking`).
    pub async fn call_with(
        &self,
        wait: Duration,
        asking: bool,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Reply, StoreError> {
        let id = self.queue(wait, usize::from(asking), Piece::Whole, |state| {
            state.close_batch();
            if asking {
                Command::new(&mut state.queued, 1).arg(b"ASKING");
            }
            write(&mut state.queued);
        })?;
        self.wait(id).await
    }

    /// Sends `call` merged with the other calls queued before the driver next writes (when the
    /// settings say so), and waits for its piece of the reply, `wait` at most.
    ///
    /// A Redis that answers `NOSCRIPT` (restarted, flushed) is sent the script and the call
    /// is retried once. The calls of one merged call meet `NOSCRIPT` together: the first
    /// sends the script, and the others retry behind it without sending it again.
    pub async fn call_merged(
        &self,
        wait: Duration,
        call: &M::Call<'_>,
    ) -> Result<Reply, StoreError> {
        self.merged(wait, call, false).await
    }

    /// `call_merged` right after `ASKING`, on a cluster node that is importing the call's
    /// slot (it answers only calls that say they were sent there by an `ASK` redirection).
    pub async fn call_merged_asking(
        &self,
        wait: Duration,
        call: &M::Call<'_>,
    ) -> Result<Reply, StoreError> {
        self.merged(wait, call, true).await
    }

    async fn merged(
        &self,
        wait: Duration,
        call: &M::Call<'_>,
        asking: bool,
    ) -> Result<Reply, StoreError> {
        let mut loads_seen = 0;
        let first = self.queue_merged(wait, call, asking, &mut loads_seen)?;
        match self.wait(first).await {
            Err(error) if error.is_noscript() => {
                self.load_script_unless_sent_since(wait, loads_seen)?;
                let retry = self.queue_merged(wait, call, asking, &mut loads_seen)?;
                self.wait(retry).await
            }
            reply => reply,
        }
    }

    /// Queues a mergeable call (after `ASKING` when `asking`); `loads_seen` is set to how many
    /// times the script had been sent to be loaded by then.
    fn queue_merged(
        &self,
        wait: Duration,
        call: &M::Call<'_>,
        asking: bool,
        loads_seen: &mut u64,
    ) -> Result<u64, StoreError> {
        let piece = Piece::Merged {
            bytes: M::reply_bytes(call),
            last: false,
        };
        let merge = self.shared.settings.merge && !asking;
        self.queue(wait, usize::from(asking), piece, |state| {
            if !merge || !state.batch.fits(call) {
                state.close_batch();
            }
            if asking {
                Command::new(&mut state.queued, 1).arg(b"ASKING");
            }
            state.batch.add(call);
            state.merged += 1;
            *loads_seen = state.script_loads;
        })
    }

    /// Sends the script to be loaded, unless it was sent since a call that met `NOSCRIPT`
    /// was queued (`loads_seen`): that load goes to Redis before the call's retry.
    fn load_script_unless_sent_since(
        &self,
        wait: Duration,
        loads_seen: u64,
    ) -> Result<(), StoreError> {
        if self.shared.lock().script_loads != loads_seen {
            return Ok(());
        }
        let id = self.queue(wait, 0, Piece::Whole, |state| {
            state.close_batch();
            state.script_loads += 1;
            Command::new(&mut state.queued, 3)
                .arg(b"SCRIPT")
                .arg(b"LOAD")
                .arg(M::SCRIPT.as_bytes());
        })?;
        // Nobody waits for its reply: the retry behind it tells whether it worked.
        drop(self.wait(id));
        Ok(())
    }

    fn wait(&self, id: u64) -> Pending<'_, M> {
        Pending {
            shared: &self.shared,
            id,
            taken: false,
        }
    }

    /// Queues a call: `write` appends its command, after `unheeded` commands whose replies
    /// nobody waits for (`ASKING`). The call's id.
    fn queue(
        &self,
        wait: Duration,
        unheeded: usize,
        piece: Piece,
        write: impl FnOnce(&mut State<M>),
    ) -> Result<u64, StoreError> {
        let mut state = self.shared.lock();
        if state.calls.len() + unheeded >= MOST_WAITING {
            return Err(ConnectionError::TooManyWaiting {
                waiting: MOST_WAITING,
            }
            .into());
        }
        // The driver starts on the caller's event loop; off one, the call fails, not panics.
        let runtime = match state.driver_running {
            true => None,
            false => Some(
                tokio::runtime::Handle::try_current().map_err(|_| ConnectionError::NoEventLoop)?,
            ),
        };
        let nothing_queued = state.queued.is_empty() && state.merged == 0;
        write(&mut state);
        let queued_at = Instant::now();
        for _ in 0..unheeded {
            state.calls.push_back(Call {
                queued_at,
                sent_at: None,
                wait,
                state: CallState::Finished,
                piece: Piece::Whole,
            });
        }
        let id = state.first + state.calls.len() as u64;
        state.calls.push_back(Call {
            queued_at,
            sent_at: None,
            wait,
            state: CallState::Waiting(None),
            piece,
        });
        if let Some(runtime) = runtime {
            state.driver_running = true;
            runtime.spawn(Connection::new(self.shared.clone()));
        } else if nothing_queued || !state.timer_armed {
            // Queued commands mean the driver is already on its way to write them; an
            // unarmed timer, that it must arm for this call.
            if let Some(driver) = &state.driver {
                driver.wake_by_ref();
            }
        }
        Ok(id)
    }
}

impl<M> Drop for Pipe<M> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.closed = true;
        if let Some(driver) = &state.driver {
            driver.wake_by_ref();
        }
    }
}

impl<M> Shared<M> {
    fn lock(&self) -> MutexGuard<'_, State<M>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = b"before".to_vec();
        Command::new(&mut out, 3)
            .arg(b"SET")
            .arg(b"k")
            .arg(b"two\r\nlines");
        assert_eq!(
            out,
            b"before*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\ntwo\r\nlines\r\n"
        );
    }
}
