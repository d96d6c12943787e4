//! The gateway's HTTP/1 server: every HTTP/1.0 and HTTP/1.1 connection is served here from its
//! first byte to its last — request bodies (Content-Length and chunked, through the framing
//! `crate::http1::framing` shares with the upstream client), `Expect: 100-continue`, `HEAD`,
//! keep-alive and pipelining, upgrades (the connection goes to the tunnel after the 101), and
//! the answers to heads that cannot be served (`crate::http1::HeadError`). hyper serves only
//! HTTP/2, and only when a connection starts with its preface (RFC 9113 §3.4).

use std::future::poll_fn;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use http::{Response, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite, WriteHalf};

use super::watch::{Activity, Answering};
use crate::http1::HeadError;
use crate::http1::upgrade::UpgradeSender;
use crate::proxy::{self, ClientConnection};
use crate::response::ResponseBody;
use crate::runtime::Runtime;

mod buffers;
mod closing;
mod fate;
mod reader;
#[cfg(test)]
mod tests;
mod write;

use crate::http1::request_head::{Arriving, Parsed, parse_request};
use reader::{Pumped, Reader};
use write::{send_continue, write_response, write_watched};

/// The first bytes of every HTTP/2 connection (RFC 9113 §3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Why a connection must close now, as the connection's watch tells it.
pub(super) enum Close {
    /// The gateway is shutting down: finish the request being answered, then close.
    Stop,
    /// Idle for `idle_timeout`.
    Idle,
    /// A request head took longer than `header_read_timeout`.
    SlowHead,
    /// The client took nothing sent to it for `send_timeout`.
    SendStalled,
}

/// The connection's watch: shutdown, idle, slow-head and send deadlines.
pub(super) trait Watch {
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Close>;
}

/// A client connection as served here: it can take back bytes read from it, so that a
/// connection handed on (to HTTP/2, to a tunnel) reads them first.
pub(super) trait ClientIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    fn put_back(&mut self, read: BytesMut);
}

/// How serving here ended.
pub(super) enum Ended {
    Closed,
    /// The connection starts with the HTTP/2 preface, which `Connection::into_io` puts back.
    Http2,
    /// The 101 is written: the connection (`Connection::into_io`) goes to the tunnel.
    Upgrade(UpgradeSender),
}

/// What is needed to answer a request.
pub(super) struct Answerer<'a> {
    pub runtime: &'a ArcSwap<Runtime>,
    pub client: &'a ClientConnection,
    pub activity: &'a Arc<Activity>,
    /// The connection may speak HTTP/2 (plain, or TLS without ALPN `http/1.1`).
    pub http2_allowed: bool,
    /// `[server] max_header_bytes` when the connection was accepted.
    pub max_header_bytes: usize,
}

/// One HTTP/1 connection, split so that a request body is read while its answer is written.
pub(super) struct Connection<S> {
    reader: Reader<S>,
    writer: WriteHalf<S>,
    /// Lent while a response is written (`buffers`): an idle connection holds none.
    out: Vec<u8>,
}

impl<S: ClientIo> Connection<S> {
    /// Made before the connection's task first runs, so that its future holds the connection
    /// once, in place, rather than the socket and then the connection made of it.
    pub(super) fn new(io: S) -> Connection<S> {
        let (reader, writer) = tokio::io::split(io);
        Connection {
            // No buffer until bytes arrive: a connection opened and left silent holds none.
            reader: Reader::new(reader, BytesMut::new()),
            writer,
            out: Vec::new(),
        }
    }

    /// The connection again, with the bytes read and not served put back (for HTTP/2 or a
    /// tunnel).
    pub(super) fn into_io(self) -> S {
        let mut io = self.reader.io.unsplit(self.writer);
        io.put_back(self.reader.read);
        io
    }

    /// Serves requests until the connection closes, is upgraded, or turns out to be HTTP/2.
    pub(super) async fn run<W: Watch>(&mut self, answerer: &Answerer<'_>, watch: &mut W) -> Ended {
        if answerer.http2_allowed {
            match self.starts_with_preface(watch).await {
                Some(true) => return Ended::Http2,
                Some(false) => {}
                None => return Ended::Closed,
            }
        }
        // Room above max_header_bytes, so that `proxy` answers a head a little over it with
        // the limit that applies to the request line and fields together; past this, the
        // server does.
        let max_head = answerer.max_header_bytes * 2 + 8192;
        match self.serve(answerer, watch, max_head).await {
            Some(upgrade) => Ended::Upgrade(upgrade),
            None => Ended::Closed,
        }
    }

    /// Reads until the bytes differ from the HTTP/2 preface (false) or are all of it (true);
    /// None when the connection closes first.
    async fn starts_with_preface<W: Watch>(&mut self, watch: &mut W) -> Option<bool> {
        loop {
            let read = &self.reader.read;
            let n = read.len().min(HTTP2_PREFACE.len());
            if read[..n] != HTTP2_PREFACE[..n] {
                return Some(false);
            }
            if n == HTTP2_PREFACE.len() {
                return Some(true);
            }
            tokio::select! {
                biased;
                got = self.reader.read_more() => if !got {
                    return None;
                },
                _ = poll_fn(|cx| watch.poll_close(cx)) => return None,
            }
        }
    }
}

/// What became of one request.
enum Served {
    /// The connection may serve the next request.
    Next,
    /// Close after the answer, reading what the client still sends for a while.
    Close,
    /// Close at once: the client is gone or stalled.
    Abort,
    /// The 101 is written: the connection goes to the tunnel.
    Upgrade(UpgradeSender),
}

impl<S: ClientIo> Connection<S> {
    /// Serves requests until the connection closes; the sender of an upgrade when it is
    /// switched instead.
    async fn serve<W: Watch>(
        &mut self,
        answerer: &Answerer<'_>,
        watch: &mut W,
        max_head: usize,
    ) -> Option<UpgradeSender> {
        loop {
            if self.reader.read.is_empty() {
                // Idle until the next request's first bytes, holding no buffer meanwhile.
                buffers::give_back_read(&mut self.reader.read);
                buffers::give_back_write(&mut self.out);
                if !pin!(self.head_arrives(answerer, watch)).await {
                    return None;
                }
            }
            // A request's state (its head, the pipeline's future, the writing) is allocated
            // once its first bytes are here and freed when it is answered, so that an idle
            // connection's task holds none of it: a few hundred bytes rather than kilobytes.
            // Allocated first and then written, the future can be made in place rather than
            // made on the stack and copied (its ~5 KB) into the allocation.
            let next = Box::write(
                Box::new_uninit(),
                self.serve_next(answerer, watch, max_head),
            );
            let served = Box::into_pin(next).await;
            match served {
                Served::Next => {}
                Served::Close => {
                    // Boxed: the lingering close's state is needed once, at the end.
                    Box::pin(self.close()).await;
                    return None;
                }
                Served::Abort => return None,
                Served::Upgrade(sender) => return Some(sender),
            }
            if !self.reader.read.is_empty() {
                // A pipelined head that began to arrive while this one was answered is timed
                // from now.
                answerer.activity.bytes_arrived();
            }
        }
    }

    /// Waits for more of a request head; false when the client closes or the watch closes the
    /// connection first.
    async fn head_arrives<W: Watch>(&mut self, answerer: &Answerer<'_>, watch: &mut W) -> bool {
        tokio::select! {
            biased;
            got = self.reader.read_more() => got,
            close = poll_fn(|cx| watch.poll_close(cx)) => {
                if let Close::SlowHead = close {
                    tracing::debug!(peer = %answerer.client.peer, "closing: request head not complete within header_read_timeout");
                }
                false
            }
        }
    }

    /// Reads the next request and answers it. The request stays where it is parsed until it
    /// goes to the pipeline: each move of it is a copy of a few hundred bytes.
    async fn serve_next<W: Watch>(
        &mut self,
        answerer: &Answerer<'_>,
        watch: &mut W,
        max_head: usize,
    ) -> Served {
        let arriving = loop {
            match parse_request(&mut self.reader.read, max_head) {
                Parsed::Request(arriving) => break arriving,
                // The configured limit, not the buffer's room above it, is what the client
                // is told.
                Parsed::Refused(HeadError::TooLarge(_)) => {
                    self.refuse(
                        HeadError::TooLarge(answerer.max_header_bytes),
                        answerer.client,
                    )
                    .await;
                    return Served::Abort;
                }
                Parsed::Refused(error) => {
                    self.refuse(error, answerer.client).await;
                    return Served::Abort;
                }
                Parsed::Partial => {}
            }
            if !pin!(self.head_arrives(answerer, watch)).await {
                return Served::Abort;
            }
        };
        let Arriving {
            mut request,
            body,
            keep_alive,
            expects_continue,
            asks_upgrade,
            takes_trailers,
        } = arriving;
        let (mut answer_to, upgrade) = self.connect(
            &mut request,
            body,
            expects_continue,
            asks_upgrade,
            keep_alive,
        );
        answer_to.takes_trailers = takes_trailers;
        // In flight until its response is written: the watch keeps such a connection and
        // times its writes, not its idleness.
        let answering = Answering::begin(answerer.activity, Version::HTTP_11);
        // Pinned here and only borrowed by `answer`, not moved into a future of its own.
        let answered = {
            let handling = pin!(proxy::handle(
                answerer.runtime.load_full(),
                answerer.client.clone(),
                request
            ));
            pin!(self.answer(watch, handling)).await
        };
        let Some((response, mut stopping)) = answered else {
            return Served::Abort;
        };
        let upgrading = response.status() == StatusCode::SWITCHING_PROTOCOLS;
        let answer_to = self.connection_after(&response, answer_to, stopping);
        // Written here, not in a function of its own: the response and the writing future
        // are not moved once more.
        buffers::lend_write(&mut self.out);
        let written = {
            let writing = pin!(write_response(
                &mut self.writer,
                &mut self.out,
                response,
                answer_to
            ));
            pin!(write_watched(
                writing,
                &mut self.reader,
                watch,
                &mut stopping
            ))
            .await
        };
        drop(answering);
        self.served(written, upgrading, upgrade, stopping, answerer)
    }

    /// The answer `handling` gives, and whether the gateway began shutting down meanwhile;
    /// `None` when the client went away first (its answer is dropped: an upstream request in
    /// flight is abandoned and the route's slot freed). The body is read as it is asked for.
    async fn answer<W: Watch>(
        &mut self,
        watch: &mut W,
        mut handling: Pin<&mut impl Future<Output = Response<ResponseBody>>>,
    ) -> Option<(Response<ResponseBody>, bool)> {
        let mut stopping = false;
        loop {
            tokio::select! {
                biased;
                response = handling.as_mut() => return Some((response, stopping)),
                pumped = poll_fn(|cx| self.reader.poll_pump(cx)) => match pumped {
                    Pumped::Closed => return None,
                    Pumped::SendContinue => {
                        if !pin!(send_continue(&mut self.writer, watch, &mut stopping)).await {
                            return None;
                        }
                    }
                },
                // Only shutdown fires while a request is answered (the watch keeps a
                // connection with one in flight): finish it, then close.
                _ = poll_fn(|cx| watch.poll_close(cx)), if !stopping => stopping = true,
            }
        }
    }
}
