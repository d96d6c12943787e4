//! What the rest of the gateway runs on: injected time, the current worker's index, per-thread
//! spare buffers, a future polled only when its own waker fires, the log lines' queue, and
//! what a local resource shortage is. Imports nothing else.

pub(crate) mod clock;
pub(crate) mod log_queue;
pub(crate) mod only_when_woken;
pub(crate) mod shortage;
pub(crate) mod spare;
pub mod worker;
