//! HTTP/1.1 to upstream servers, spoken in the request's own task: the request head is written,
//! the request body streamed and the response read on one connection, with no connection task
//! and no channels in between. hyper's client passed every request, response and body chunk
//! through channels to a task of its own; that hop was a large share of the instructions of a
//! proxied request (docs/PERFORMANCE.md, "Measured behind the code").
//!
//! What comes back is checked as strictly as hyper did: a malformed or oversized head, a bad
//! Content-Length or chunk line, or a body cut short is an error, and a connection is only
//! reused after a request written whole before its response began and a response that was
//! framed, read to its end and followed by nothing else (docs/operations.md, "Timeouts").

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode};
use http_body::Frame;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::exchange::{UpstreamBody, UpstreamHead};
use super::headers::{Role, SetFields, list_items, role};
use crate::fields::upstream::UpstreamFields;

mod deadlines;
mod error;
mod upload;

pub(crate) use crate::http1::framing::Framing;
pub(crate) use crate::http1::stream::{Stream, Upgraded};
pub(crate) use deadlines::ExchangeDeadlines;
pub(crate) use error::ExchangeError;

pub(crate) use crate::http1::encode::{encode_field, hex};
use crate::http1::framing::decode;
use crate::http1::response_head::parse_response;
use deadlines::Waiting;
use upload::Upload;

/// The response head parser and body decoder as a connection uses them: for the fuzz targets
/// (`crate::testing::fuzz`).
#[cfg(any(test, fuzzing, feature = "testing"))]
pub(crate) mod for_fuzzing {
    use bytes::{Bytes, BytesMut};
    use http_body::Frame;

    use super::{ExchangeError, Framing, ResponseHead};

    pub(crate) const MAX_HEAD_BYTES: usize = super::MAX_HEAD_BYTES;

    pub(crate) fn parse_head(
        buf: &mut BytesMut,
        head_request: bool,
    ) -> Result<Option<ResponseHead>, ExchangeError> {
        super::parse_head(buf, head_request)
    }

    pub(crate) fn decode(
        framing: &mut Framing,
        buf: &mut BytesMut,
    ) -> Result<Option<Frame<Bytes>>, ExchangeError> {
        Ok(super::decode(framing, buf)?)
    }
}

/// Longest response head (status line and fields), and longest trailer section, accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most interim (1xx) answers one request may get before its final one: far more than
/// any real server sends (a 100 Continue, a few 103 Early Hints).
pub(crate) const MAX_INTERIM: usize = 100;
/// First read size of a connection; doubles while reads fill it, up to `MAX_READ`.
const FIRST_READ: usize = 8 * 1024;
const MAX_READ: usize = 256 * 1024;
/// Room for a request head, kept while a connection is idle.
const IDLE_WRITE_BUFFER: usize = 1024;

/// The response head, and how its body is read; its fields as the client gets them.
pub(crate) type ResponseHead = crate::http1::response_head::ResponseHead<UpstreamFields>;

/// The response head at the start of `buf`, taken off it once complete.
#[inline]
fn parse_head(
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<Option<ResponseHead>, ExchangeError> {
    parse_response(buf, head_request, MAX_HEAD_BYTES)
}

/// True when the kernel holds nothing to read on `tcp` and the upstream has not closed it: a
/// peek, a system call, as tokio's cached readiness may be older than the bytes.
fn nothing_waiting(tcp: &TcpStream) -> bool {
    let peeked = socket2::SockRef::from(tcp).peek(&mut [MaybeUninit::uninit(); 1]);
    matches!(peeked, Err(error) if error.kind() == io::ErrorKind::WouldBlock)
}

/// One connection: its stream, buffers, and the request body it is still sending.
pub(crate) struct Connection {
    stream: Stream,
    read_buf: BytesMut,
    read_size: usize,
    /// Bytes to write: the request head, then each body frame in its framing.
    write_buf: Vec<u8>,
    written: usize,
    flushed: bool,
    body: Option<UpstreamBody>,
    chunked: bool,
    upload: Upload,
    /// The final response head began to arrive before the request was written whole: the
    /// upstream may take the rest of the request for another one, so the connection is not
    /// reused (an early answer; docs/operations.md, "Timeouts").
    answered_during_upload: bool,
    /// Interim (1xx) answers to the request in flight.
    interim: usize,
    /// The request carried a body. An upstream that ignores bodies on some path (a "CL.0"
    /// server) takes such a body for a request of its own, whose answer then arrives on the
    /// idle connection or, if it is slow, as the answer to the next client's request.
    sent_body: bool,
    /// A request with a body got an answer other than 2xx: the answers of servers that did not
    /// read a body (401, 403, 404, 405, redirects) are where an unread body hides, so such a
    /// connection is not reused.
    body_maybe_unread: bool,
    /// The current exchange's deadline for the response head.
    deadline: Instant,
    /// When the response body began to wait for the upstream, while it does.
    read_wait: Option<Instant>,
    /// When the request body began to wait for the client, while it does.
    upload_wait: Option<Instant>,
    limits: ExchangeDeadlines,
    /// One timer for the connection's life (a timer per request took a lock to enter tokio's
    /// timer wheel and another to leave it), armed at the next deadline or earlier: an
    /// exchange whose deadline is later leaves it as it is, and a timer that fires early is
    /// moved on to the deadline then (`deadlines`). Most exchanges end before either, so most
    /// never touch the timer.
    timer: Pin<Box<Sleep>>,
}

impl Connection {
    /// Must be called within the runtime whose requests will use the connection.
    pub(crate) fn new(stream: Stream, limits: ExchangeDeadlines) -> Connection {
        Connection {
            answered_during_upload: false,
            interim: 0,
            sent_body: false,
            body_maybe_unread: false,
            read_wait: None,
            upload_wait: None,
            limits,
            deadline: Instant::now(),
            timer: Box::pin(tokio::time::sleep_until(Instant::now())),
            stream,
            read_buf: BytesMut::new(),
            read_size: FIRST_READ,
            write_buf: Vec::with_capacity(IDLE_WRITE_BUFFER),
            written: 0,
            flushed: true,
            body: None,
            chunked: false,
            upload: Upload::Done,
        }
    }

    /// False when the upstream closed the connection (or sent bytes nobody asked for) while
    /// it was idle. After a bodiless exchange, no system call in the usual case: tokio knows
    /// whether the socket became readable when its event loop last looked. After a request
    /// with a body, what the kernel holds is asked (a peek): an answer to a body the upstream
    /// took for a request may have come since the event loop looked, and reusing the
    /// connection would give it to the next client.
    pub(crate) fn is_open(&mut self) -> bool {
        if self.sent_body && !nothing_waiting(self.stream.tcp()) {
            return false;
        }
        if let Stream::Plain(tcp) = &self.stream {
            // Any byte read here means the connection is not reused anyway.
            let open = tcp.try_read(&mut [0u8; 1]);
            return matches!(open, Err(error) if error.kind() == io::ErrorKind::WouldBlock);
        }
        let mut cx = Context::from_waker(Waker::noop());
        self.poll_read_more(&mut cx).is_pending()
    }

    /// True after a complete exchange: the request sent whole before the response began,
    /// and nothing read beyond the response.
    pub(crate) fn is_idle(&self) -> bool {
        self.read_buf.is_empty()
            && matches!(self.upload, Upload::Done)
            && !self.answered_during_upload
            && !self.body_maybe_unread
    }

    /// Lets go of buffers a large exchange grew, before the connection waits in the pool: up to
    /// 1024 idle connections per server and worker must not each hold a quarter megabyte.
    pub(crate) fn release_buffers(&mut self) {
        if self.read_buf.capacity() > 2 * FIRST_READ {
            self.read_buf = BytesMut::new();
        }
        self.read_size = FIRST_READ;
        self.write_buf.shrink_to(IDLE_WRITE_BUFFER);
    }

    /// True while the request body is still being sent.
    fn is_uploading(&self) -> bool {
        matches!(self.upload, Upload::Sending)
    }

    /// Sends the request and reads the response head, which must come by `deadline`; 1xx
    /// answers other than 101 are skipped, at most `MAX_INTERIM` of them.
    pub(crate) async fn exchange(
        &mut self,
        head: &UpstreamHead,
        set: &SetFields,
        body: UpstreamBody,
        deadline: Instant,
    ) -> Result<ResponseHead, ExchangeError> {
        self.deadline = deadline;
        self.answered_during_upload = false;
        self.interim = 0;
        self.body_maybe_unread = false;
        self.read_wait = None;
        self.upload_wait = None;
        self.start(head, set, body);
        let offered = set.upgrade.as_ref();
        let head_request = head.method == Method::HEAD;
        std::future::poll_fn(|cx| self.poll_head(cx, head_request, offered)).await
    }

    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        head_request: bool,
        offered: Option<&HeaderValue>,
    ) -> Poll<Result<ResponseHead, ExchangeError>> {
        loop {
            // An upstream may answer before the whole body is sent; both go on together.
            self.drive_upload(cx)?;
            if let Some(head) = parse_head(&mut self.read_buf, head_request)? {
                let status = head.response.status();
                if status == StatusCode::SWITCHING_PROTOCOLS && !switches_to_offered(&head, offered)
                {
                    return Poll::Ready(Err(ExchangeError::UnexpectedUpgrade));
                }
                if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
                    // An interim answer does not begin the response; what follows it might.
                    // A flood of them is a broken or hostile upstream: it ends at the cap,
                    // and they never move the response deadline.
                    self.interim += 1;
                    if self.interim > MAX_INTERIM {
                        return Poll::Ready(Err(ExchangeError::TooManyInterim));
                    }
                    if Instant::now() >= self.deadline {
                        return Poll::Ready(Err(ExchangeError::TimedOut));
                    }
                    self.answered_during_upload &= !self.read_buf.is_empty();
                    continue;
                }
                self.body_maybe_unread = self.sent_body && !status.is_success();
                return Poll::Ready(Ok(head));
            }
            if self.read_buf.len() >= MAX_HEAD_BYTES {
                return Poll::Ready(Err(ExchangeError::HeadTooLarge));
            }
            let Poll::Ready(read) = self.poll_read_more(cx) else {
                return self.poll_deadlines(cx, Waiting::Head).map(Err);
            };
            let read = read?;
            if read > 0 && self.is_uploading() {
                self.answered_during_upload = true;
            }
            if read == 0 {
                if !self.read_buf.is_empty() {
                    // Part of an answer came: not a connection closed before the request.
                    return Poll::Ready(Err(ExchangeError::Framing(
                        "the connection closed inside the response head",
                    )));
                }
                return Poll::Ready(Err(
                    match std::mem::replace(&mut self.upload, Upload::Done) {
                        // Why the upstream stopped reading says more than the close itself.
                        Upload::Failed(error) => ExchangeError::Io(error),
                        _ => ExchangeError::Closed,
                    },
                ));
            }
        }
    }

    fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.read_buf.capacity() - self.read_buf.len() < self.read_size / 2 {
            self.read_buf.reserve(self.read_size);
        }
        let room = self.read_buf.capacity() - self.read_buf.len();
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.stream),
            cx,
            &mut self.read_buf
        ))?;
        if n == room && self.read_size < MAX_READ {
            self.read_size *= 2;
        }
        Poll::Ready(Ok(n))
    }

    /// The next piece of the response body: a data or trailers frame, `None` at its end.
    pub(crate) fn poll_frame(
        &mut self,
        framing: &mut Framing,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        loop {
            // A client body that fails otherwise does not end a response that is coming: the
            // upstream may not need the rest (its answer no longer waits on it).
            self.drive_upload(cx).ok();
            if self.upload_wait.is_some()
                && let Poll::Ready(timed_out) = self.poll_deadlines(cx, Waiting::Body)
            {
                return Poll::Ready(Some(Err(timed_out)));
            }
            if let Some(frame) = decode(framing, &mut self.read_buf).transpose() {
                return Poll::Ready(Some(frame.map_err(ExchangeError::from)));
            }
            if *framing == Framing::Done {
                return Poll::Ready(None);
            }
            let Poll::Ready(read) = self.poll_read_more(cx) else {
                self.begin_read_wait();
                return self.poll_deadlines(cx, Waiting::Body).map(|e| Some(Err(e)));
            };
            self.read_wait = None;
            if read? == 0 {
                if *framing == Framing::UntilClose {
                    *framing = Framing::Done;
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(Err(ExchangeError::BodyCut)));
            }
        }
    }

    /// The connection as a byte stream for the protocol a 101 switched to; the bytes the
    /// upstream sent after the 101 come first.
    pub(crate) fn into_upgraded(self) -> Upgraded {
        Upgraded {
            stream: self.stream,
            early: self.read_buf.freeze(),
        }
    }
}

/// Whether a 101 switches to a protocol the request offered (RFC 9110 §7.8): a tunnel to
/// anything else (an `h2c` the gateway never offered) would carry requests no limit saw.
fn switches_to_offered(head: &ResponseHead, offered: Option<&HeaderValue>) -> bool {
    let Some(offered) = offered else {
        return false;
    };
    let mut upgrade = head
        .fields
        .iter()
        .filter(|(name, _)| role(name) == Role::Upgrade);
    let Some((_, chosen)) = upgrade.next() else {
        return false;
    };
    let chosen = chosen.trim_ascii();
    upgrade.next().is_none()
        && list_items(offered.as_bytes()).any(|item| item.eq_ignore_ascii_case(chosen))
}

#[cfg(test)]
mod tests;
