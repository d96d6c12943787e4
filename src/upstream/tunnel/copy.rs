//! Copying an upgraded connection's bytes both ways, holding a buffer only while bytes are in
//! it. `tokio::io::copy_bidirectional` keeps two 8 KiB buffers for a tunnel's whole life; a
//! WebSocket idle between messages then costs 16 KiB for nothing. Here each direction borrows
//! a buffer from its thread when a read brings bytes and gives it back once they are written.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One read's room, as tokio's copy gives it.
const BUFFER: usize = 8 * 1024;
/// Buffers a thread keeps for its tunnels' next reads.
const KEPT: usize = 8;

thread_local! {
    static BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

fn lend() -> Vec<u8> {
    BUFFERS
        .try_with(|kept| kept.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| vec![0; BUFFER])
}

fn give_back(buffer: &mut Vec<u8>) {
    let buffer = std::mem::take(buffer);
    let _ = BUFFERS.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.len() < KEPT {
            kept.push(buffer);
        }
    });
}

/// One direction of the copy: bytes read and not yet written, in a borrowed buffer.
#[derive(Default)]
pub(super) struct OneWay {
    /// Empty (no allocation) while no bytes wait to be written.
    buffer: Vec<u8>,
    written: usize,
    read: usize,
    /// Written bytes the writer may still hold (a TLS layer): flushed before waiting to read.
    unflushed: bool,
    /// The reader ended: the writer is shut down, then this direction is done.
    ended: bool,
    done: bool,
    copied: u64,
}

impl OneWay {
    /// Whether this direction holds a buffer (for tests).
    #[cfg(test)]
    pub(super) fn holds_buffer(&self) -> bool {
        self.buffer.capacity() > 0
    }

    /// Copies until `reader` ends and `writer` is shut down: the bytes copied.
    pub(super) fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut reader: Pin<&mut R>,
        mut writer: Pin<&mut W>,
    ) -> Poll<io::Result<u64>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        loop {
            if self.done {
                return Poll::Ready(Ok(self.copied));
            }
            if self.written < self.read {
                let n = ready!(
                    writer
                        .as_mut()
                        .poll_write(cx, &self.buffer[self.written..self.read])
                )?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.written += n;
                self.copied += n as u64;
                self.unflushed = true;
                if self.written == self.read {
                    (self.written, self.read) = (0, 0);
                    give_back(&mut self.buffer);
                }
                continue;
            }
            if self.ended {
                ready!(writer.as_mut().poll_shutdown(cx))?;
                self.done = true;
                continue;
            }
            if self.buffer.is_empty() {
                self.buffer = lend();
            }
            let mut room = ReadBuf::new(&mut self.buffer);
            match reader.as_mut().poll_read(cx, &mut room) {
                Poll::Ready(Ok(())) if !room.filled().is_empty() => {
                    self.read = room.filled().len();
                }
                Poll::Ready(Ok(())) => {
                    give_back(&mut self.buffer);
                    self.ended = true;
                }
                Poll::Ready(Err(error)) => {
                    give_back(&mut self.buffer);
                    return Poll::Ready(Err(error));
                }
                Poll::Pending => {
                    give_back(&mut self.buffer);
                    if self.unflushed {
                        ready!(writer.as_mut().poll_flush(cx))?;
                        self.unflushed = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// Copies both ways between `a` and `b` until both directions ended (each side's writer shut
/// down once the other's reader ended), or either failed: the bytes copied from `a` to `b`
/// and from `b` to `a`.
pub(super) async fn copy_both_ways<A, B>(a: &mut A, b: &mut B) -> io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut a_to_b = OneWay::default();
    let mut b_to_a = OneWay::default();
    std::future::poll_fn(|cx| {
        let forth = a_to_b.poll_copy(cx, Pin::new(&mut *a), Pin::new(&mut *b))?;
        let back = b_to_a.poll_copy(cx, Pin::new(&mut *b), Pin::new(&mut *a))?;
        match (forth, back) {
            (Poll::Ready(forth), Poll::Ready(back)) => Poll::Ready(Ok((forth, back))),
            _ => Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn a_direction_holds_no_buffer_between_bursts() {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut client, mut from_client) = tokio::io::duplex(1024);
        let (mut to_upstream, mut upstream) = tokio::io::duplex(1024);
        let mut way = OneWay::default();
        let mut copy = |way: &mut OneWay, cx: &mut Context<'_>| {
            way.poll_copy(cx, Pin::new(&mut from_client), Pin::new(&mut to_upstream))
        };
        assert!(copy(&mut way, &mut cx).is_pending());
        assert!(!way.holds_buffer(), "waiting for the first burst");

        tokio_test::block_on(client.write_all(b"burst one")).unwrap();
        assert!(copy(&mut way, &mut cx).is_pending());
        assert!(!way.holds_buffer(), "the burst was written through");
        let mut got = [0; 9];
        tokio_test::block_on(upstream.read_exact(&mut got)).unwrap();
        assert_eq!(&got, b"burst one");

        drop(client);
        assert!(matches!(copy(&mut way, &mut cx), Poll::Ready(Ok(9))));
        let mut rest = Vec::new();
        tokio_test::block_on(upstream.read_to_end(&mut rest)).unwrap();
        assert!(rest.is_empty(), "the upstream's side was shut down");
    }

    #[test]
    fn a_writer_that_takes_nothing_keeps_the_bytes_and_the_buffer_until_it_does() {
        let mut cx = Context::from_waker(Waker::noop());
        let (mut client, mut from_client) = tokio::io::duplex(64 * 1024);
        // Room for 4 bytes: the rest waits in the buffer.
        let (mut to_upstream, mut upstream) = tokio::io::duplex(4);
        let mut way = OneWay::default();
        tokio_test::block_on(client.write_all(b"0123456789")).unwrap();
        let polled = way.poll_copy(
            &mut cx,
            Pin::new(&mut from_client),
            Pin::new(&mut to_upstream),
        );
        assert!(polled.is_pending());
        assert!(way.holds_buffer());

        let mut got = Vec::new();
        while got.len() < 10 {
            let mut chunk = [0; 4];
            let n = tokio_test::block_on(upstream.read(&mut chunk)).unwrap();
            got.extend_from_slice(&chunk[..n]);
            let _ = way.poll_copy(
                &mut cx,
                Pin::new(&mut from_client),
                Pin::new(&mut to_upstream),
            );
        }
        assert_eq!(got, b"0123456789");
        assert!(!way.holds_buffer());
    }

    #[tokio::test]
    async fn both_ways_end_when_both_sides_have_ended() {
        let (mut client, mut gateway_client_side) = tokio::io::duplex(1024);
        let (mut gateway_upstream_side, mut upstream) = tokio::io::duplex(1024);
        let copying = tokio::spawn(async move {
            copy_both_ways(&mut gateway_client_side, &mut gateway_upstream_side).await
        });
        client.write_all(b"ping").await.unwrap();
        let mut got = [0; 4];
        upstream.read_exact(&mut got).await.unwrap();
        upstream.write_all(b"pong!").await.unwrap();
        let mut back = [0; 5];
        client.read_exact(&mut back).await.unwrap();
        assert_eq!((&got, &back), (b"ping", b"pong!"));
        client.shutdown().await.unwrap();
        upstream.shutdown().await.unwrap();
        assert_eq!(copying.await.unwrap().unwrap(), (4, 5));
    }
}
