//! A response body as hyper's HTTP/2 server sends it: it keeps its request in flight for the
//! connection's watch until hyper is done with it (a response's body ends after its request's
//! body: the upstream exchange that reads the request body lives in the response body), and it
//! tells the watch while it waits for the client to take its next piece.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::watch::Answering;
use crate::response::ResponseBody;

pub(super) struct ServedBody {
    inner: ResponseBody,
    answering: Answering,
    /// The watch's bucket of a wait for the client in progress.
    waiting: Option<usize>,
}

impl ServedBody {
    pub(super) fn new(inner: ResponseBody, answering: Answering) -> ServedBody {
        ServedBody {
            inner,
            answering,
            waiting: None,
        }
    }

    fn resume(&mut self) {
        if let Some(bucket) = self.waiting.take() {
            self.answering.activity().stream_resumed(bucket);
        }
    }
}

impl Body for ServedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        // Asked for more: the client took the last piece (HTTP/2 polls a body only once the
        // stream has room in the client's window).
        self.resume();
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if !self.inner.is_end_stream() && matches!(frame, Some(Ok(_))) {
            self.waiting = Some(self.answering.activity().stream_waits());
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for ServedBody {
    fn drop(&mut self) {
        self.resume();
    }
}
