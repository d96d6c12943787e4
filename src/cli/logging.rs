//! Where the gateway's log lines go.

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;

use tracing_subscriber::EnvFilter;

use crate::rt::log_queue::LogQueue;

/// Logs go to stderr, as text or one JSON object a line (`[log] format`); RUST_LOG filters.
/// Colours only on a terminal: in a file or a log collector they are escape codes to strip.
/// Lines go through a bounded queue written by a thread of its own, so a log reader that
/// stalls or a full disk drops lines (counted) instead of blocking or stopping the gateway.
pub(super) fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let queue = match LogQueue::start(std::io::stderr()) {
        Ok(queue) => queue,
        Err(error) => {
            say_err!("cannot start the log writer thread: {error}");
            return;
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        // A failed write is counted by the queue; the default reports it with `eprintln!`,
        // which panics when stderr itself is what failed.
        .log_internal_errors(false)
        .with_writer(queue.clone());
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
    let _ = QUEUE.set(queue);
}

/// The process's log queue, once logging is set up.
static QUEUE: OnceLock<LogQueue> = OnceLock::new();

/// How long the last lines may take to be written when the process exits: they are written
/// unless the log reader has stopped reading, and then the exit does not wait for it.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// Waits for the lines logged so far to be written, at most `FLUSH_AT_EXIT`.
pub(super) fn flush_at_exit() {
    if let Some(queue) = QUEUE.get() {
        queue.flush(FLUSH_AT_EXIT);
    }
}
