//! The reading half of a served connection: request heads, the body of the request being
//! answered (decoded as the answering side asks for it, `crate::http1::request_body`), and
//! pipelined bytes read ahead while a request is answered.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use tokio::io::{AsyncRead, ReadHalf};

use super::buffers::poll_read_lent;

use crate::http1::framing::{Chunk, Framing, decode};
use crate::http1::request_body::{BodyFeed, Demand};

/// Bytes read ahead while a request is answered (pipelined requests); past this, reading waits.
const MAX_READ_AHEAD: usize = 64 * 1024;

/// What reading asks of the connection's loop.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Pumped {
    /// The client closed its side, or reading failed.
    Closed,
    /// The body is wanted and the client waits for `100 Continue` before sending it.
    SendContinue,
}

/// The body being read for the answering side.
struct Feeding {
    feed: BodyFeed,
    framing: Framing,
    expects_continue: bool,
}

pub(super) struct Reader<S> {
    pub(super) io: ReadHalf<S>,
    pub(super) read: BytesMut,
    body: Option<Feeding>,
    /// The body's framing was broken, or the client left in its middle: nothing more on this
    /// connection can be read as a request.
    broken: bool,
    closed: bool,
}

impl<S: AsyncRead> Reader<S> {
    pub(super) fn new(io: ReadHalf<S>, read: BytesMut) -> Reader<S> {
        Reader {
            io,
            read,
            body: None,
            broken: false,
            closed: false,
        }
    }

    /// Starts reading a body framed by `length` (`None`: chunked) for `feed`.
    pub(super) fn feed_body(&mut self, feed: BodyFeed, length: Option<u64>, continues: bool) {
        let framing = match length {
            Some(n) => Framing::Length(n),
            None => Framing::Chunked(Chunk::Size),
        };
        self.body = Some(Feeding {
            feed,
            framing,
            expects_continue: continues,
        });
    }

    /// The request's body has been read to its end (or it had none): what follows is the next
    /// request. A body the answering side gave up on is discarded here when the rest of it
    /// is already buffered.
    pub(super) fn body_done(&mut self) -> bool {
        if let Some(body) = &mut self.body
            && body.feed.is_abandoned()
        {
            while let Ok(Some(_)) = decode(&mut body.framing, &mut self.read) {}
            if body.framing == Framing::Done {
                self.body = None;
            }
        }
        self.body.is_none() && !self.broken
    }

    /// Reads more from the client; false at its end or on an error.
    pub(super) async fn read_more(&mut self) -> bool {
        std::future::poll_fn(|cx| self.poll_read_more(cx)).await
    }

    fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.closed {
            return Poll::Ready(false);
        }
        match ready!(poll_read_lent(Pin::new(&mut self.io), cx, &mut self.read)) {
            Ok(n) if n > 0 => Poll::Ready(true),
            _ => {
                self.closed = true;
                Poll::Ready(false)
            }
        }
    }

    /// Feeds the body as it is asked for, else reads ahead; ready only when the loop must act.
    /// Safe to drop and call again at any point: its state is all in `self`.
    pub(super) fn poll_pump(&mut self, cx: &mut Context<'_>) -> Poll<Pumped> {
        loop {
            let Some(body) = &mut self.body else {
                if self.read.len() >= MAX_READ_AHEAD {
                    return Poll::Pending;
                }
                if !ready!(self.poll_read_more(cx)) {
                    return Poll::Ready(Pumped::Closed);
                }
                continue;
            };
            match ready!(body.feed.poll_demand(cx)) {
                // Left in place: the loop discards it if it is all buffered, or closes.
                Demand::Abandoned => return Poll::Pending,
                Demand::Frame => {}
            }
            if std::mem::take(&mut body.expects_continue) && self.read.is_empty() {
                return Poll::Ready(Pumped::SendContinue);
            }
            match decode(&mut body.framing, &mut self.read) {
                Ok(Some(frame)) => {
                    let last = body.framing == Framing::Done;
                    body.feed.give(frame, last);
                    if last {
                        self.body = None;
                    }
                }
                Ok(None) if body.framing == Framing::Done => {
                    body.feed.end();
                    self.body = None;
                }
                Ok(None) => {
                    // The body's next bytes have not arrived yet.
                    if !ready!(self.poll_read_more(cx)) {
                        self.fail("the client closed the connection in the middle of the body");
                        return Poll::Ready(Pumped::Closed);
                    }
                }
                Err(error) => {
                    self.fail_with(Box::new(error));
                    return Poll::Pending;
                }
            }
        }
    }

    fn fail(&mut self, reason: &'static str) {
        self.fail_with(reason.into());
    }

    fn fail_with(&mut self, error: crate::http1::request_body::BoxError) {
        if let Some(body) = self.body.take() {
            body.feed.fail(error);
        }
        self.broken = true;
    }
}
