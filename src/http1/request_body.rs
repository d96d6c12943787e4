//! A request body as an HTTP/1 server hands it to the code that answers the request: the
//! connection's task reads and decodes the body only when the answering side asks for more
//! (`ServerBody::poll_frame`), one frame at a time. So a body nobody reads is never read
//! (the connection then closes after the answer), `100 Continue` goes out only when the body is
//! wanted (RFC 9110 §10.1.1), and a slow upstream slows the client down instead of filling
//! memory.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The answering side's end.
pub(crate) struct ServerBody {
    shared: Arc<Mutex<Slot>>,
    /// Bytes still to come, when the body has a Content-Length.
    left: Option<u64>,
    ended: bool,
}

/// The connection's end.
pub(crate) struct BodyFeed {
    shared: Arc<Mutex<Slot>>,
}

/// What the connection's end is asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Demand {
    /// The next frame.
    Frame,
    /// The body was dropped before its end: what is left of it will not be read.
    Abandoned,
}

#[derive(Default)]
struct Slot {
    wanted: bool,
    frame: Option<Result<Frame<Bytes>, BoxError>>,
    ended: bool,
    dropped: bool,
    reader: Option<Waker>,
    connection: Option<Waker>,
}

/// A connected pair for a body of `length` bytes (`None`: chunked).
pub(crate) fn server_body(length: Option<u64>) -> (BodyFeed, ServerBody) {
    let shared = Arc::new(Mutex::new(Slot::default()));
    let feed = BodyFeed {
        shared: shared.clone(),
    };
    let body = ServerBody {
        shared,
        left: length,
        ended: false,
    };
    (feed, body)
}

fn lock(shared: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    // Neither side panics while holding the lock; a poisoned slot still holds valid state.
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn wake(waker: &mut Option<Waker>) {
    if let Some(waker) = waker.take() {
        waker.wake();
    }
}

impl BodyFeed {
    /// Ready when the answering side waits for a frame, or dropped the body unfinished.
    pub(crate) fn poll_demand(&self, cx: &mut Context<'_>) -> Poll<Demand> {
        let mut slot = lock(&self.shared);
        if slot.dropped {
            return Poll::Ready(Demand::Abandoned);
        }
        if slot.wanted && slot.frame.is_none() && !slot.ended {
            return Poll::Ready(Demand::Frame);
        }
        if !slot
            .connection
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            slot.connection = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// True when the answering side dropped the body before its end.
    pub(crate) fn is_abandoned(&self) -> bool {
        lock(&self.shared).dropped
    }

    /// Hands over the next frame; `last` when the body ends with it.
    pub(crate) fn give(&self, frame: Frame<Bytes>, last: bool) {
        let mut slot = lock(&self.shared);
        slot.frame = Some(Ok(frame));
        slot.ended = last;
        slot.wanted = false;
        wake(&mut slot.reader);
    }

    /// The body ended.
    pub(crate) fn end(&self) {
        let mut slot = lock(&self.shared);
        slot.ended = true;
        wake(&mut slot.reader);
    }

    /// The body cannot be read to its end: the client's framing is broken or it went away.
    pub(crate) fn fail(&self, error: BoxError) {
        let mut slot = lock(&self.shared);
        slot.frame = Some(Err(error));
        slot.ended = true;
        wake(&mut slot.reader);
    }
}

impl Drop for BodyFeed {
    fn drop(&mut self) {
        let mut slot = lock(&self.shared);
        if !slot.ended {
            slot.frame = Some(Err("the client connection was closed".into()));
            slot.ended = true;
        }
        wake(&mut slot.reader);
    }
}

impl Body for ServerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let mut slot = lock(&self.shared);
        if let Some(frame) = slot.frame.take() {
            let ended = slot.ended;
            drop(slot);
            self.ended = ended;
            if let (Ok(frame), Some(left)) = (&frame, self.left.as_mut())
                && let Some(data) = frame.data_ref()
            {
                *left = left.saturating_sub(data.len() as u64);
            }
            return Poll::Ready(Some(frame));
        }
        if slot.ended {
            drop(slot);
            self.ended = true;
            return Poll::Ready(None);
        }
        slot.wanted = true;
        if !slot
            .reader
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            slot.reader = Some(cx.waker().clone());
        }
        wake(&mut slot.connection);
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}

impl Drop for ServerBody {
    fn drop(&mut self) {
        let mut slot = lock(&self.shared);
        if !slot.ended {
            slot.dropped = true;
            wake(&mut slot.connection);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn frames_are_read_only_when_asked_for_and_the_body_ends_after_the_last() {
        let (feed, mut body) = server_body(Some(5));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        // Nothing asked yet: the connection reads nothing.
        assert!(feed.poll_demand(&mut cx).is_pending());
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
        assert_eq!(feed.poll_demand(&mut cx), Poll::Ready(Demand::Frame));
        feed.give(Frame::data(Bytes::from_static(b"abc")), false);
        assert!(feed.poll_demand(&mut cx).is_pending());
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "abc");
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
        feed.give(Frame::data(Bytes::from_static(b"de")), true);
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "de"
        );
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_body_dropped_unfinished_is_abandoned_and_a_gone_connection_is_an_error() {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let (feed, body) = server_body(None);
        drop(body);
        assert_eq!(feed.poll_demand(&mut cx), Poll::Ready(Demand::Abandoned));

        let (feed, mut body) = server_body(None);
        drop(feed);
        assert!(body.frame().await.unwrap().is_err());
        assert!(body.frame().await.is_none());
    }
}
