//! One emptied byte buffer per thread for each kind of buffer an answer carries, kept for the
//! thread's next answer. Answers are made and written on one worker thread, so one slot
//! nearly always holds a buffer when the next answer needs one. Allocating each buffer for
//! every answer and freeing it with the answer put an allocation and a free per buffer on
//! every request.

use std::cell::Cell;
use std::thread::LocalKey;

/// A thread's slot for one kind of buffer (declare it with `thread_local!` and a `const`
/// initializer of `Cell::new(Vec::new())`).
pub(crate) type Slot = LocalKey<Cell<Vec<u8>>>;

/// The buffer in `slot` (or a new one), with room for `capacity` bytes.
pub(crate) fn take(slot: &'static Slot, capacity: usize) -> Vec<u8> {
    // Not there once the thread's storage is gone (a thread ending).
    let mut buffer = slot.try_with(Cell::take).unwrap_or_default();
    buffer.reserve(capacity);
    buffer
}

/// Takes `buffer` (leaving it empty) and keeps it, emptied, in `slot` when it holds at most
/// `max_capacity` bytes: one grown by a large answer is freed, so the slot stays small. For
/// the `Drop` of what holds the buffer.
pub(crate) fn keep(slot: &'static Slot, buffer: &mut Vec<u8>, max_capacity: usize) {
    let mut buffer = std::mem::take(buffer);
    if (1..=max_capacity).contains(&buffer.capacity()) {
        buffer.clear();
        let _ = slot.try_with(|spare| spare.set(buffer));
    }
}

/// The capacity of the buffer in `slot`, 0 for none (for tests of the kinds' users).
#[cfg(test)]
pub(crate) fn capacity_in(slot: &'static Slot) -> usize {
    let spare = slot.take();
    let capacity = spare.capacity();
    slot.set(spare);
    capacity
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static SLOT: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }

    fn spare_capacity() -> usize {
        capacity_in(&SLOT)
    }

    #[test]
    fn a_kept_buffer_is_taken_again_emptied_and_a_grown_one_is_not_kept() {
        let mut first = take(&SLOT, 64);
        first.extend_from_slice(b"first");
        let capacity = first.capacity();
        keep(&SLOT, &mut first, 64);
        assert_eq!(spare_capacity(), capacity);
        let next = take(&SLOT, 16);
        assert_eq!(
            (next.len(), next.capacity(), spare_capacity()),
            (0, capacity, 0)
        );

        let mut grown = vec![0u8; 65];
        keep(&SLOT, &mut grown, 64);
        assert_eq!(spare_capacity(), 0);
        keep(&SLOT, &mut Vec::new(), 64);
        assert_eq!(spare_capacity(), 0);
    }
}
