//! Which serving worker the calling thread is (see `server`). Per-worker resources (idle
//! upstream connections, Redis connections) are indexed by it, so a connection is only ever
//! used by the thread, and the event loop, that made it.

use std::cell::Cell;

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as serving worker `index`.
pub fn set(index: usize) {
    WORKER.with(|worker| worker.set(index));
}

/// The calling thread's worker index; 0 on threads that are not workers.
pub fn current() -> usize {
    WORKER.with(Cell::get)
}
