//! The buffers a connection reads requests into and writes answers from, lent by its worker
//! thread while a request is read and answered, and given back when the connection goes idle.
//! An idle keep-alive connection then holds no buffer, only its task and socket: thousands of
//! idle clients cost no 8 KiB each (nginx frees a keep-alive connection's buffers the same
//! way while it waits for the next request). A thread keeps a few given-back buffers for its
//! next requests, so lending one costs no allocation under load.

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::AsyncRead;
use tokio_util::io::poll_read_buf;

use crate::rt::spare;

/// A lent read buffer's size: most request heads fit in one.
pub(super) const READ_BUFFER: usize = 8 * 1024;
/// Smallest room a read is given, and how much more a full buffer gets.
const READ_ROOM: usize = 1024;
const READ_GROWTH: usize = 8 * 1024;
/// Read buffers a thread keeps: as many connections as usually read at once on one worker.
const KEPT_READ_BUFFERS: usize = 16;
/// A read buffer grown past this (a large head, a body read through it) is freed, not kept.
const MAX_KEPT_READ_BUFFER: usize = 4 * READ_BUFFER;
/// A write buffer grown past this by a large response is freed, not kept.
pub(super) const MAX_KEPT_WRITE_BUFFER: usize = 128 * 1024;

thread_local! {
    static READ_BUFFERS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static WRITE_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// An empty read buffer: one the thread kept, or a new one.
fn lend_read() -> BytesMut {
    READ_BUFFERS
        .try_with(|kept| kept.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(READ_BUFFER))
}

/// Gives back `read` when it holds no bytes (a pipelined request's bytes stay): the
/// connection is left with no buffer. Kept for the thread's next reads when its allocation is
/// whole again (what was split off it, the last request's head, is gone) and not grown.
pub(super) fn give_back_read(read: &mut BytesMut) {
    if !read.is_empty() || read.capacity() == 0 {
        return;
    }
    let mut buffer = std::mem::take(read);
    if buffer.try_reclaim(READ_BUFFER) && buffer.capacity() <= MAX_KEPT_READ_BUFFER {
        let _ = READ_BUFFERS.try_with(|kept| {
            let mut kept = kept.borrow_mut();
            if kept.len() < KEPT_READ_BUFFERS {
                kept.push(buffer);
            }
        });
    }
}

/// Reads from `io` into `read`, lending `read` a buffer when it has none and giving it back
/// when nothing came (not ready, the end, an error): waiting costs a connection no buffer.
pub(super) fn poll_read_lent<R: AsyncRead>(
    io: Pin<&mut R>,
    cx: &mut Context<'_>,
    read: &mut BytesMut,
) -> Poll<std::io::Result<usize>> {
    let lent = read.capacity() == 0;
    if lent {
        *read = lend_read();
    } else if read.capacity() - read.len() < READ_ROOM {
        read.reserve(READ_GROWTH);
    }
    let polled = poll_read_buf(io, cx, read);
    if lent {
        give_back_read(read);
    }
    polled
}

/// A write buffer for an answer: the thread's kept one, or a new one.
pub(super) fn lend_write(out: &mut Vec<u8>) {
    if out.capacity() == 0 {
        *out = spare::take(&WRITE_BUFFER, 0);
    }
}

/// Gives back the write buffer of an answer that is written: an idle connection holds none.
pub(super) fn give_back_write(out: &mut Vec<u8>) {
    spare::keep(&WRITE_BUFFER, out, MAX_KEPT_WRITE_BUFFER);
}

/// How many read buffers this thread keeps (for tests).
#[cfg(test)]
pub(super) fn kept_read_buffers() -> usize {
    READ_BUFFERS.with(|kept| kept.borrow().len())
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    #[test]
    fn a_read_that_finds_nothing_leaves_no_buffer_and_one_that_reads_keeps_it() {
        let kept = kept_read_buffers();
        let mut cx = Context::from_waker(Waker::noop());
        let mut read = BytesMut::new();
        let (client, mut server) = tokio::io::duplex(64);
        let polled = poll_read_lent(Pin::new(&mut server), &mut cx, &mut read);
        assert!(polled.is_pending());
        assert_eq!(read.capacity(), 0, "a connection waiting holds no buffer");
        assert_eq!(kept_read_buffers(), kept + 1, "the lent buffer went back");

        drop(client);
        let polled = poll_read_lent(Pin::new(&mut server), &mut cx, &mut read);
        assert!(matches!(polled, Poll::Ready(Ok(0))));
        assert_eq!(read.capacity(), 0, "the end leaves no buffer either");
    }

    #[test]
    fn bytes_read_keep_the_buffer_until_it_is_given_back_empty() {
        let mut cx = Context::from_waker(Waker::noop());
        let mut read = BytesMut::new();
        let (mut client, mut server) = tokio::io::duplex(64);
        tokio_test::block_on(tokio::io::AsyncWriteExt::write_all(&mut client, b"GET / ")).unwrap();
        let polled = poll_read_lent(Pin::new(&mut server), &mut cx, &mut read);
        assert!(matches!(polled, Poll::Ready(Ok(6))));
        assert!(read.capacity() >= READ_BUFFER);

        give_back_read(&mut read);
        assert_eq!(&read[..], b"GET / ", "bytes not yet served stay");
        let head = read.split_to(6);
        give_back_read(&mut read);
        assert_eq!(read.capacity(), 0);
        drop(head);
    }

    #[test]
    fn a_grown_read_buffer_is_freed_not_kept() {
        READ_BUFFERS.with(|kept| kept.borrow_mut().clear());
        let mut grown = BytesMut::with_capacity(MAX_KEPT_READ_BUFFER + 1);
        give_back_read(&mut grown);
        assert_eq!((grown.capacity(), kept_read_buffers()), (0, 0));
        let mut normal = BytesMut::with_capacity(READ_BUFFER);
        give_back_read(&mut normal);
        assert_eq!(kept_read_buffers(), 1);
    }

    #[test]
    fn a_write_buffer_is_lent_and_given_back() {
        let mut out = Vec::new();
        lend_write(&mut out);
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
        give_back_write(&mut out);
        assert_eq!(
            out.capacity(),
            0,
            "an idle connection holds no write buffer"
        );
        assert!(spare::capacity_in(&WRITE_BUFFER) > 0);
    }
}
