//! HTTP/1.1 to upstream servers, spoken in the request's own task: the request head is written,
//! the request body streamed and the response read on one connection, with no connection task
//! and no channels in between. hyper's client passed every request, response and body chunk
//! through channels to a task of its own; that hop was about a third of the instructions of a
//! proxied request (docs/PERFORMANCE.md).
//!
//! What comes back is checked as strictly as hyper did: a malformed or oversized head, a bad
//! Content-Length or chunk line, or a body cut short is an error, and a connection is only
//! reused after a response that was framed, read to its end and followed by nothing else.

use std::io;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Version};
use http_body::{Body, Frame};
use hyper_util::rt::TokioIo;
use smallvec::SmallVec;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::headers::SetFields;
use super::upstream::UpstreamBody;

/// Longest response head (status line and fields), and longest trailer section, accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most fields in one response head.
const MAX_HEADERS: usize = 128;
/// Longest chunk-size line, extensions included.
const MAX_CHUNK_LINE: usize = 4096;
/// First read size of a connection; doubles while reads fill it, up to `MAX_READ`.
const FIRST_READ: usize = 8 * 1024;
const MAX_READ: usize = 256 * 1024;

/// What the TLS connector hands over for `https://` servers.
pub type TlsStream = tokio_rustls::client::TlsStream<TokioIo<TokioIo<TcpStream>>>;

/// A connection to an upstream server, plain or TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

/// Why an exchange with an upstream server failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    #[error("the connection closed before a complete response head")]
    Closed,
    #[error("malformed response head: {0}")]
    MalformedHead(httparse::Error),
    #[error("response head larger than {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("invalid response framing: {0}")]
    Framing(&'static str),
    #[error("the connection closed before the end of the response body")]
    BodyCut,
    #[error("no response head before the response timeout")]
    TimedOut,
    #[error("101 Switching Protocols to a request that asked for no upgrade")]
    UnexpectedUpgrade,
    #[error("reading the client's request body failed: {0}")]
    ClientBody(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ExchangeError {
    /// True when the upstream closed or reset the connection before answering anything: on a
    /// reused connection, most likely it closed it while idle and never saw the request.
    pub fn is_close_before_answer(&self) -> bool {
        match self {
            ExchangeError::Closed => true,
            ExchangeError::Io(error) => matches!(
                error.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionAborted
            ),
            _ => false,
        }
    }
}

/// How a response body is delimited, and how much of it is left.
#[derive(Debug, PartialEq)]
pub enum Framing {
    Length(u64),
    Chunked(Chunk),
    /// Ends when the upstream closes the connection, which is then not reused.
    UntilClose,
    /// A 101: the connection now carries another protocol.
    Upgraded,
    Done,
}

/// Where a chunked body's reader is.
#[derive(Debug, PartialEq)]
pub enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
}

/// The response head, and how its body is read.
pub struct ResponseHead {
    pub response: Response<()>,
    pub framing: Framing,
    /// The connection may carry another request once the body is read.
    pub keep_alive: bool,
}

#[derive(Debug)]
enum Upload {
    Sending,
    Done,
    /// The upstream stopped taking the request body (it may still answer).
    Failed(io::Error),
}

/// One connection: its stream, buffers, and the request body it is still sending.
pub struct Connection {
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
    /// The current exchange's deadline for the response head. One timer for the connection's
    /// life: moving it later is an atomic store while it is armed, where a timer per request
    /// took a lock to enter tokio's timer wheel and another to leave it.
    deadline: Pin<Box<Sleep>>,
}

impl Connection {
    /// Must be called within the runtime whose requests will use the connection.
    pub fn new(stream: Stream) -> Connection {
        Connection {
            deadline: Box::pin(tokio::time::sleep_until(Instant::now())),
            stream,
            read_buf: BytesMut::new(),
            read_size: FIRST_READ,
            write_buf: Vec::with_capacity(1024),
            written: 0,
            flushed: true,
            body: None,
            chunked: false,
            upload: Upload::Done,
        }
    }

    /// False when the upstream closed the connection (or sent bytes nobody asked for) while
    /// it was idle. No system call in the usual case: tokio knows whether the socket became
    /// readable since it was last read to the end.
    pub fn is_open(&mut self) -> bool {
        if let Stream::Plain(tcp) = &self.stream {
            // Any byte read here means the connection is not reused anyway.
            let open = tcp.try_read(&mut [0u8; 1]);
            return matches!(open, Err(error) if error.kind() == io::ErrorKind::WouldBlock);
        }
        let mut cx = Context::from_waker(Waker::noop());
        self.poll_read_more(&mut cx).is_pending()
    }

    /// True after a complete exchange: the request sent, and nothing read beyond the response.
    pub fn is_idle(&self) -> bool {
        self.read_buf.is_empty() && matches!(self.upload, Upload::Done)
    }

    /// True while the request body is still being sent.
    pub fn is_uploading(&self) -> bool {
        matches!(self.upload, Upload::Sending)
    }

    /// Sends the request and reads the response head, which must come by `deadline`; 1xx
    /// answers other than 101 are skipped.
    pub async fn exchange(
        &mut self,
        parts: &Parts,
        set: &SetFields,
        body: UpstreamBody,
        deadline: Instant,
    ) -> Result<ResponseHead, ExchangeError> {
        self.deadline.as_mut().reset(deadline);
        self.start(parts, set, body);
        let wants_upgrade = set.upgrade.is_some();
        let head_request = parts.method == Method::HEAD;
        std::future::poll_fn(|cx| self.poll_head(cx, head_request, wants_upgrade)).await
    }

    /// Encodes the request head; the body goes out as the exchange is polled.
    fn start(&mut self, parts: &Parts, set: &SetFields, body: UpstreamBody) {
        let length = if body.is_end_stream() {
            None
        } else {
            Some(body.size_hint().exact())
        };
        self.write_buf.clear();
        self.written = 0;
        encode_head(&mut self.write_buf, parts, set, length);
        self.flushed = false;
        self.chunked = matches!(length, Some(None));
        self.body = length.is_some().then_some(body);
        self.upload = Upload::Sending;
    }

    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        head_request: bool,
        wants_upgrade: bool,
    ) -> Poll<Result<ResponseHead, ExchangeError>> {
        loop {
            // An upstream may answer before the whole body is sent; both go on together.
            self.drive_upload(cx)?;
            if let Some(head) = parse_head(&mut self.read_buf, head_request)? {
                let status = head.response.status();
                if status == StatusCode::SWITCHING_PROTOCOLS && !wants_upgrade {
                    return Poll::Ready(Err(ExchangeError::UnexpectedUpgrade));
                }
                if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
                    continue;
                }
                return Poll::Ready(Ok(head));
            }
            if self.read_buf.len() >= MAX_HEAD_BYTES {
                return Poll::Ready(Err(ExchangeError::HeadTooLarge));
            }
            let Poll::Ready(read) = self.poll_read_more(cx) else {
                return match self.deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(ExchangeError::TimedOut)),
                    Poll::Pending => Poll::Pending,
                };
            };
            if read? == 0 {
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

    /// Sends what it can of the request without waiting. A write failure does not end the
    /// exchange (the upstream may have answered early and stopped reading); the client's
    /// body failing does.
    fn drive_upload(&mut self, cx: &mut Context<'_>) -> Result<(), ExchangeError> {
        if !matches!(self.upload, Upload::Sending) {
            return Ok(());
        }
        match self.poll_upload(cx) {
            Poll::Ready(Ok(())) => self.upload = Upload::Done,
            Poll::Ready(Err(ExchangeError::Io(error))) => {
                self.body = None;
                self.upload = Upload::Failed(error);
            }
            Poll::Ready(Err(error)) => {
                // The upstream got part of a body: the connection must not carry another.
                self.upload = Upload::Failed(io::Error::other("the client's body failed"));
                return Err(error);
            }
            Poll::Pending => {}
        }
        Ok(())
    }

    /// Writes the pending bytes, then the body frame by frame; ready once all is sent.
    fn poll_upload(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ExchangeError>> {
        loop {
            while self.written < self.write_buf.len() {
                let pending = &self.write_buf[self.written..];
                let n = ready!(Pin::new(&mut self.stream).poll_write(cx, pending))?;
                if n == 0 {
                    return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero).into()));
                }
                self.written += n;
            }
            self.write_buf.clear();
            self.written = 0;
            if !self.flushed {
                ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
                self.flushed = true;
            }
            let Some(body) = self.body.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            match ready!(Pin::new(body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.encode_data(&data),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.encode_end(Some(&trailers));
                        }
                    }
                },
                Some(Err(error)) => {
                    self.body = None;
                    return Poll::Ready(Err(ExchangeError::ClientBody(error)));
                }
                None => self.encode_end(None),
            }
        }
    }

    fn encode_data(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.chunked {
            let mut size = [0u8; 16];
            self.write_buf.extend_from_slice(hex(data.len(), &mut size));
            self.write_buf.extend_from_slice(b"\r\n");
            self.write_buf.extend_from_slice(data);
            self.write_buf.extend_from_slice(b"\r\n");
        } else {
            self.write_buf.extend_from_slice(data);
        }
        self.flushed = false;
    }

    /// The body ended (with trailers, which only a chunked body can carry).
    fn encode_end(&mut self, trailers: Option<&HeaderMap>) {
        if self.chunked {
            self.write_buf.extend_from_slice(b"0\r\n");
            for (name, value) in trailers.into_iter().flatten() {
                encode_field(&mut self.write_buf, name.as_str(), value.as_bytes());
            }
            self.write_buf.extend_from_slice(b"\r\n");
            self.flushed = false;
        }
        self.body = None;
    }

    /// Finishes sending the request body after the response has been read; ready with
    /// whether the connection can be reused.
    pub fn poll_finish_upload(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        while matches!(self.upload, Upload::Sending) {
            if self.drive_upload(cx).is_err() {
                return Poll::Ready(false);
            }
            if matches!(self.upload, Upload::Sending) {
                return Poll::Pending;
            }
        }
        Poll::Ready(self.is_idle())
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
    pub fn poll_frame(
        &mut self,
        framing: &mut Framing,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        loop {
            self.drive_upload(cx).ok();
            if let Some(frame) = decode(framing, &mut self.read_buf).transpose() {
                return Poll::Ready(Some(frame));
            }
            if *framing == Framing::Done {
                return Poll::Ready(None);
            }
            if ready!(self.poll_read_more(cx))? == 0 {
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
    pub fn into_upgraded(self) -> Upgraded {
        Upgraded {
            stream: self.stream,
            early: self.read_buf.freeze(),
        }
    }
}

/// The response head at the start of `buf`, split off it once complete.
fn parse_head(
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<Option<ResponseHead>, ExchangeError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let length = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(length)) if length <= MAX_HEAD_BYTES => length,
        Ok(httparse::Status::Complete(_)) => return Err(ExchangeError::HeadTooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(ExchangeError::MalformedHead(error)),
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(ExchangeError::Framing("status code out of range"))?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    // Names now, values as slices of the head once it is split off the buffer (no copy).
    let base = buf.as_ptr() as usize;
    let mut names: SmallVec<[(HeaderName, Range<usize>); 24]> = SmallVec::new();
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes())
            .map_err(|_| ExchangeError::Framing("invalid field name"))?;
        // httparse hands out slices of the buffer; anything else is refused, not trusted.
        let start = (field.value.as_ptr() as usize).wrapping_sub(base);
        let end = start
            .checked_add(field.value.len())
            .filter(|&end| end <= length)
            .ok_or(ExchangeError::Framing("field value outside the head"))?;
        names.push((name, start..end));
    }
    let head = buf.split_to(length).freeze();
    // Room for what the gateway adds (request id, rate-limit fields) without a regrow.
    let mut headers = HeaderMap::with_capacity(names.len() + 6);
    for (name, range) in names {
        let value = HeaderValue::from_maybe_shared(head.slice(range))
            .map_err(|_| ExchangeError::Framing("invalid field value"))?;
        headers.append(name, value);
    }
    let keep_alive = keeps_alive(version, &headers);
    let framing = response_framing(status, head_request, &mut headers)?;
    let keep_alive = keep_alive && !matches!(framing, Framing::UntilClose | Framing::Upgraded);
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    *response.headers_mut() = headers;
    Ok(Some(ResponseHead {
        response,
        framing,
        keep_alive,
    }))
}

/// Writes the request line, the request's fields less those `set` replaces, then `set`'s.
/// `length`: `None` for no body, `Some(None)` for a body of unknown length (chunked),
/// `Some(Some(n))` for `n` bytes.
pub(crate) fn encode_head(
    buf: &mut Vec<u8>,
    parts: &Parts,
    set: &SetFields,
    length: Option<Option<u64>>,
) {
    buf.extend_from_slice(parts.method.as_str().as_bytes());
    buf.push(b' ');
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    buf.extend_from_slice(target.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    let framed_here = length.is_some();
    for (name, value) in &parts.headers {
        if framed_here && (name == CONTENT_LENGTH || name == TRANSFER_ENCODING) {
            continue;
        }
        if SetFields::replaces(name) {
            continue;
        }
        encode_field(buf, name.as_str(), value.as_bytes());
    }
    for (name, value) in set.iter() {
        encode_field(buf, name.as_str(), value);
    }
    match length {
        Some(Some(n)) => {
            buf.extend_from_slice(b"content-length: ");
            buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        Some(None) => buf.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        None => {}
    }
    buf.extend_from_slice(b"\r\n");
}

fn encode_field(buf: &mut Vec<u8>, name: &str, value: &[u8]) {
    buf.reserve(name.len() + value.len() + 4);
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b": ");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

/// `n` in lowercase hexadecimal, written into `out`.
fn hex(mut n: usize, out: &mut [u8; 16]) -> &[u8] {
    let mut start = out.len();
    loop {
        start -= 1;
        out[start] = b"0123456789abcdef"[n & 0xf];
        n >>= 4;
        if n == 0 {
            return &out[start..];
        }
    }
}

/// HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 only when asked to keep it.
fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    let has = |token: &str| {
        headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|list| list.split(','))
            .any(|item| item.trim().eq_ignore_ascii_case(token))
    };
    if version == Version::HTTP_10 {
        has("keep-alive")
    } else {
        !headers.contains_key(CONNECTION) || !has("close")
    }
}

/// How the body of a response is delimited (RFC 9112 §6.3). A response with both
/// Transfer-Encoding and Content-Length loses the latter, as the client must not see both.
fn response_framing(
    status: StatusCode,
    head_request: bool,
    headers: &mut HeaderMap,
) -> Result<Framing, ExchangeError> {
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Framing::Upgraded);
    }
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Done);
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        headers.remove(CONTENT_LENGTH);
        let last_coding = headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .next_back()
            .and_then(|value| value.to_str().ok())
            .and_then(|list| list.rsplit(',').next())
            .map(str::trim);
        return Ok(match last_coding {
            Some(coding) if coding.eq_ignore_ascii_case("chunked") => Framing::Chunked(Chunk::Size),
            _ => Framing::UntilClose,
        });
    }
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        let text = value
            .to_str()
            .map_err(|_| ExchangeError::Framing("invalid Content-Length"))?;
        for item in text.split(',') {
            let n = parse_decimal(item.trim())
                .ok_or(ExchangeError::Framing("invalid Content-Length"))?;
            if length.is_some_and(|seen| seen != n) {
                return Err(ExchangeError::Framing("conflicting Content-Length values"));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => Framing::Done,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

/// Digits only (no sign, no spaces), at most 18 of them so the value cannot overflow.
fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Takes the next frame of a body off `buf`, if it holds one; `Ok(None)` when more bytes are
/// needed or the body has ended (`framing` is then `Done`).
fn decode(
    framing: &mut Framing,
    buf: &mut BytesMut,
) -> Result<Option<Frame<Bytes>>, ExchangeError> {
    loop {
        match framing {
            Framing::Done | Framing::Upgraded => return Ok(None),
            Framing::Length(left) => {
                let data = take_data(buf, left);
                if *left == 0 {
                    *framing = Framing::Done;
                }
                return Ok(data.map(Frame::data));
            }
            Framing::UntilClose => {
                return Ok((!buf.is_empty()).then(|| Frame::data(buf.split().freeze())));
            }
            Framing::Chunked(chunk) => match chunk {
                Chunk::Size => {
                    let Some(line_end) = find_line_end(buf, MAX_CHUNK_LINE)? else {
                        return Ok(None);
                    };
                    let size = chunk_size(&buf[..line_end])
                        .ok_or(ExchangeError::Framing("invalid chunk size line"))?;
                    buf.advance(line_end + 2);
                    *chunk = if size == 0 {
                        Chunk::Trailers
                    } else {
                        Chunk::Data(size)
                    };
                }
                Chunk::Data(left) => {
                    // Never empty: a zero size line starts the trailers instead.
                    let data = take_data(buf, left);
                    if *left == 0 {
                        *chunk = Chunk::DataEnd;
                    }
                    return Ok(data.map(Frame::data));
                }
                Chunk::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(None);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ExchangeError::Framing("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    *chunk = Chunk::Size;
                }
                Chunk::Trailers => return decode_trailers(framing, buf),
            },
        }
    }
}

/// Up to `left` bytes of body from `buf`, `None` when it is empty.
fn take_data(buf: &mut BytesMut, left: &mut u64) -> Option<Bytes> {
    if buf.is_empty() || *left == 0 {
        return None;
    }
    let n = usize::try_from(*left).map_or(buf.len(), |left| left.min(buf.len()));
    *left -= n as u64;
    Some(buf.split_to(n).freeze())
}

/// The trailer section after the last chunk, up to its empty line.
fn decode_trailers(
    framing: &mut Framing,
    buf: &mut BytesMut,
) -> Result<Option<Frame<Bytes>>, ExchangeError> {
    if buf.starts_with(b"\r\n") {
        buf.advance(2);
        *framing = Framing::Done;
        return Ok(None);
    }
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let (length, trailers) = match httparse::parse_headers(buf, &mut fields) {
        Ok(httparse::Status::Complete((length, fields))) => {
            let mut trailers = HeaderMap::with_capacity(fields.len());
            for field in fields {
                let name = HeaderName::from_bytes(field.name.as_bytes());
                let value = HeaderValue::from_bytes(field.value);
                if let (Ok(name), Ok(value)) = (name, value) {
                    trailers.append(name, value);
                }
            }
            (length, trailers)
        }
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => return Ok(None),
        Ok(httparse::Status::Partial) => return Err(ExchangeError::HeadTooLarge),
        Err(error) => return Err(ExchangeError::MalformedHead(error)),
    };
    buf.advance(length);
    *framing = Framing::Done;
    Ok(Some(Frame::trailers(trailers)))
}

/// Where the first line of `buf` ends (its CR of CRLF); an error if no line end comes within
/// `limit` bytes or a bare LF or CR comes first.
fn find_line_end(buf: &[u8], limit: usize) -> Result<Option<usize>, ExchangeError> {
    let window = &buf[..buf.len().min(limit)];
    match window.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(at) if window.get(at) == Some(&b'\n') => {
            Err(ExchangeError::Framing("bare LF in chunk line"))
        }
        Some(at) => match buf.get(at + 1) {
            Some(b'\n') => Ok(Some(at)),
            Some(_) => Err(ExchangeError::Framing("bare CR in chunk line")),
            None => Ok(None),
        },
        None if buf.len() >= limit => Err(ExchangeError::Framing("chunk line too long")),
        None => Ok(None),
    }
}

/// The size of a chunk line: hex digits, then optional extensions after `;`.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    let rest = line[digits..].trim_ascii_start();
    if !rest.is_empty() && rest[0] != b';' {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(&line[..digits]).ok()?, 16).ok()
}

/// An upstream connection after a 101, with the bytes that followed the 101 head.
pub struct Upgraded {
    stream: Stream,
    early: Bytes,
}

impl AsyncRead for Upgraded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.early.is_empty() {
            let n = this.early.len().min(buf.remaining());
            buf.put_slice(&this.early.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The data, the trailers, and the bytes left over once the body ended.
    type Decoded = (Vec<u8>, Option<HeaderMap>, Vec<u8>);

    /// Feeds `wire` to `decode` in pieces of the given sizes.
    fn decode_in_pieces(
        mut framing: Framing,
        wire: &[u8],
        pieces: &[usize],
    ) -> Result<Decoded, ExchangeError> {
        let (mut data, mut trailers) = (Vec::new(), None);
        let mut buf = BytesMut::new();
        let mut rest = wire;
        let mut sizes = pieces.iter().copied().cycle();
        loop {
            while let Some(frame) = decode(&mut framing, &mut buf)? {
                match frame.into_data() {
                    Ok(bytes) => data.extend_from_slice(&bytes),
                    Err(frame) => trailers = frame.into_trailers().ok(),
                }
            }
            if framing == Framing::Done || rest.is_empty() {
                return Ok((data, trailers, buf.to_vec()));
            }
            let n = sizes.next().unwrap_or(1).clamp(1, rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
    }

    fn chunked(body_chunks: &[Vec<u8>], trailer: &str) -> Vec<u8> {
        let mut wire = Vec::new();
        for chunk in body_chunks.iter().filter(|c| !c.is_empty()) {
            wire.extend_from_slice(format!("{:x};ext=1\r\n", chunk.len()).as_bytes());
            wire.extend_from_slice(chunk);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(format!("0\r\n{trailer}\r\n").as_bytes());
        wire
    }

    proptest! {
        #[test]
        fn chunked_bodies_decode_whole_however_the_bytes_arrive(
            body_chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8),
            pieces in prop::collection::vec(1usize..64, 1..16),
            with_trailer in any::<bool>(),
        ) {
            let trailer = if with_trailer { "x-sum: 7\r\n" } else { "" };
            let mut wire = chunked(&body_chunks, trailer);
            wire.extend_from_slice(b"HTTP/1.1 next");
            let (data, trailers, left) =
                decode_in_pieces(Framing::Chunked(Chunk::Size), &wire, &pieces).unwrap();
            prop_assert_eq!(data, body_chunks.concat());
            prop_assert_eq!(trailers.is_some(), with_trailer);
            if let Some(trailers) = trailers {
                prop_assert_eq!(&trailers["x-sum"], "7");
            }
            // What follows the body stays for whoever reads next.
            prop_assert!(b"HTTP/1.1 next".starts_with(&left));
        }

        #[test]
        fn length_delimited_bodies_stop_at_their_length(
            body in prop::collection::vec(any::<u8>(), 1..500),
            pieces in prop::collection::vec(1usize..64, 1..16),
        ) {
            let mut wire = body.clone();
            wire.extend_from_slice(b"extra");
            let (data, _, _) =
                decode_in_pieces(Framing::Length(body.len() as u64), &wire, &pieces).unwrap();
            prop_assert_eq!(data, body);
        }
    }

    /// Reads a whole response from `wire` as the connection would: head, then body frames.
    fn read_response(wire: &[u8], head_request: bool) -> Result<Option<Vec<u8>>, ExchangeError> {
        let mut buf = BytesMut::from(wire);
        let Some(head) = parse_head(&mut buf, head_request)? else {
            return Ok(None);
        };
        let mut framing = head.framing;
        let mut body = Vec::new();
        while let Some(frame) = decode(&mut framing, &mut buf)? {
            if let Ok(data) = frame.into_data() {
                body.extend_from_slice(&data);
            }
        }
        Ok(Some(body))
    }

    const VALID: &[u8] = b"HTTP/1.1 200 OK\r\nx-empty:\r\nx-list: a, b\r\n\
        transfer-encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\nx-sum: 1\r\n\r\n";

    proptest! {
        #[test]
        fn no_upstream_bytes_make_the_reader_panic(
            wire in prop::collection::vec(any::<u8>(), 0..600),
            head_request in any::<bool>(),
        ) {
            let _ = read_response(&wire, head_request);
        }

        #[test]
        fn no_damage_to_a_valid_response_makes_the_reader_panic(
            flips in prop::collection::vec((0..VALID.len(), any::<u8>()), 1..6),
            cut in 0..=VALID.len(),
        ) {
            let mut wire = VALID.to_vec();
            for (at, byte) in flips {
                wire[at] = byte;
            }
            wire.truncate(cut);
            let _ = read_response(&wire, false);
        }
    }

    #[test]
    fn a_valid_response_with_an_empty_field_reads_whole() {
        let mut buf = BytesMut::from(VALID);
        let head = parse_head(&mut buf, false).unwrap().unwrap();
        assert_eq!(head.response.headers()["x-empty"], "");
        assert_eq!(head.response.headers()["x-list"], "a, b");
        assert!(head.keep_alive);
        assert_eq!(read_response(VALID, false).unwrap().unwrap(), b"body");
        // A head split anywhere is simply not complete yet.
        for cut in 0..VALID.iter().position(|&b| b == b'4').unwrap() {
            assert!(
                parse_head(&mut BytesMut::from(&VALID[..cut]), false)
                    .unwrap()
                    .is_none()
            );
        }
    }

    #[test]
    fn chunk_lines_must_be_hex_sizes_with_optional_extensions() {
        assert_eq!(chunk_size(b"1a"), Some(26));
        assert_eq!(chunk_size(b"1A ; name=\"v\""), Some(26));
        assert_eq!(chunk_size(b"0"), Some(0));
        for bad in [
            &b""[..],
            b"x",
            b"-1",
            b"1 2",
            b"+5",
            b"1000000000000000",
            b" 5",
        ] {
            assert_eq!(chunk_size(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        let cases: [(&[u8], &str); 4] = [
            (b"zz\r\n", "invalid chunk size line"),
            (b"5\nhello", "bare LF in chunk line"),
            (b"5\rhello", "bare CR in chunk line"),
            (b"3\r\nabcXX", "chunk data not followed by CRLF"),
        ];
        for (wire, reason) in cases {
            let error = decode_in_pieces(Framing::Chunked(Chunk::Size), wire, &[64]).unwrap_err();
            assert!(
                matches!(error, ExchangeError::Framing(r) if r == reason),
                "{error} for {:?}",
                String::from_utf8_lossy(wire)
            );
        }
        let endless_line = vec![b'1'; MAX_CHUNK_LINE + 1];
        assert!(decode_in_pieces(Framing::Chunked(Chunk::Size), &endless_line, &[512]).is_err());
    }

    fn framing_of(
        status: u16,
        head_request: bool,
        fields: &[(&str, &str)],
    ) -> Result<Framing, ExchangeError> {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        response_framing(
            StatusCode::from_u16(status).unwrap(),
            head_request,
            &mut headers,
        )
    }

    #[test]
    fn response_bodies_are_framed_as_rfc_9112_says() {
        let length = |n| Ok::<_, ExchangeError>(Framing::Length(n));
        assert_eq!(
            framing_of(200, false, &[("content-length", "5")]).ok(),
            length(5).ok()
        );
        assert_eq!(
            framing_of(200, false, &[("content-length", "5, 5")]).ok(),
            length(5).ok()
        );
        assert_eq!(
            framing_of(200, false, &[("content-length", "0")]).ok(),
            Some(Framing::Done)
        );
        assert_eq!(
            framing_of(200, true, &[("content-length", "5")]).ok(),
            Some(Framing::Done)
        );
        for status in [204, 304, 103] {
            assert_eq!(
                framing_of(status, false, &[("content-length", "5")]).ok(),
                Some(Framing::Done)
            );
        }
        assert_eq!(framing_of(101, false, &[]).ok(), Some(Framing::Upgraded));
        assert_eq!(framing_of(200, false, &[]).ok(), Some(Framing::UntilClose));
        assert_eq!(
            framing_of(
                200,
                false,
                &[
                    ("transfer-encoding", "gzip, chunked"),
                    ("content-length", "9")
                ]
            )
            .ok(),
            Some(Framing::Chunked(Chunk::Size))
        );
        // Chunked must come last; otherwise only the close ends the body.
        assert_eq!(
            framing_of(200, false, &[("transfer-encoding", "chunked, gzip")]).ok(),
            Some(Framing::UntilClose)
        );
        for bad in ["5, 6", "-5", "+5", "5 5", "0x5", "", "99999999999999999999"] {
            assert!(
                framing_of(200, false, &[("content-length", bad)]).is_err(),
                "{bad:?}"
            );
        }
        assert!(
            framing_of(
                200,
                false,
                &[("content-length", "5"), ("content-length", "6")]
            )
            .is_err()
        );
    }

    #[test]
    fn keep_alive_follows_the_version_and_the_connection_field() {
        let with = |connection: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(value) = connection {
                headers.insert(CONNECTION, HeaderValue::from_str(value).unwrap());
            }
            headers
        };
        assert!(keeps_alive(Version::HTTP_11, &with(None)));
        assert!(!keeps_alive(Version::HTTP_11, &with(Some("Close"))));
        assert!(!keeps_alive(
            Version::HTTP_11,
            &with(Some("x-trace, close"))
        ));
        assert!(!keeps_alive(Version::HTTP_10, &with(None)));
        assert!(keeps_alive(Version::HTTP_10, &with(Some("keep-alive"))));
    }

    #[test]
    fn the_request_head_carries_the_framing_of_its_body() {
        let (mut parts, ()) = http::Request::post("/v1/orders?id=7")
            .header("host", "api")
            .header("content-length", "999")
            .body(())
            .unwrap()
            .into_parts();
        let head = |parts: &Parts, length| {
            let mut buf = Vec::new();
            encode_head(&mut buf, parts, &SetFields::default(), length);
            String::from_utf8(buf).unwrap()
        };
        assert_eq!(
            head(&parts, Some(Some(3))),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ncontent-length: 3\r\n\r\n"
        );
        assert_eq!(
            head(&parts, Some(None)),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        assert_eq!(
            head(&parts, None),
            "POST /v1/orders?id=7 HTTP/1.1\r\nhost: api\r\ncontent-length: 0\r\n\r\n"
        );
        let mut size = [0u8; 16];
        assert_eq!(hex(0, &mut size), b"0");
        assert_eq!(hex(0x1f40, &mut size), b"1f40");
    }
}
