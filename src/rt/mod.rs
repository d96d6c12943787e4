//! What the rest of the gateway runs on: injected time, the current worker's index, per-thread
//! spare buffers, and a future polled only when its own waker fires. Imports nothing else.

pub(crate) mod clock;
pub(crate) mod only_when_woken;
pub(crate) mod spare;
pub mod worker;
