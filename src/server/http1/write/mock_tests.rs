//! The writing half against scripted I/O, without sockets: a client that takes a few bytes at
//! a time and is not ready every other time, and bodies whose frames come as scripted, with
//! waits and failures between them.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Frame, SizeHint};

use super::*;
use crate::server::http1::{Close, Watch};

/// A client socket that takes at most `at_most` bytes a write, is not ready every other
/// time, and fails once it has taken `fails_after` bytes.
struct Trickle {
    taken: Vec<u8>,
    at_most: usize,
    ready: bool,
    fails_after: usize,
}

impl Trickle {
    fn new(at_most: usize) -> Trickle {
        Trickle {
            taken: Vec::new(),
            at_most,
            ready: false,
            fails_after: usize::MAX,
        }
    }
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if !std::mem::replace(&mut self.ready, false) {
            self.ready = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if self.taken.len() >= self.fails_after {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = buf.len().min(self.at_most);
        self.taken.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

enum Step {
    Data(Bytes),
    Trailers(HeaderMap),
    /// Not ready this time (woken at once).
    Wait,
    Fail,
}

/// A body whose frames come as `steps` say; of exactly `size` bytes when it says so.
struct Scripted {
    steps: VecDeque<Step>,
    size: Option<u64>,
    added: AddedFields,
}

fn scripted(steps: Vec<Step>, size: Option<u64>) -> Scripted {
    Scripted {
        steps: steps.into(),
        size,
        added: AddedFields::default(),
    }
}

impl Body for Scripted {
    type Data = Bytes;
    type Error = Box<dyn Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(match self.steps.pop_front() {
            None => None,
            Some(Step::Data(data)) => Some(Ok(Frame::data(data))),
            Some(Step::Trailers(trailers)) => Some(Ok(Frame::trailers(trailers))),
            Some(Step::Fail) => Some(Err("the upstream reset the stream".into())),
            Some(Step::Wait) => {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        })
    }

    fn size_hint(&self) -> SizeHint {
        self.size
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

impl OutgoingBody for Scripted {
    fn content_type(&self) -> Option<&'static str> {
        None
    }

    fn added(&self) -> &AddedFields {
        &self.added
    }

    fn upstream_fields(&self) -> Option<&UpstreamFields> {
        None
    }
}

const TO_HTTP11: AnswerTo = AnswerTo {
    keep_alive: true,
    head_only: false,
    http10: false,
    takes_trailers: false,
};

/// Writes `body` as a 200 (or `status`) through a socket taking 7 bytes at a time.
async fn write(
    status: StatusCode,
    body: Scripted,
    answer_to: AnswerTo,
) -> (Result<bool, WriteError>, Vec<u8>) {
    let mut io = Trickle::new(7);
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let written = write_response(&mut io, &mut Vec::new(), response, answer_to).await;
    (written, io.taken)
}

/// The head (as text) and what follows it.
fn split_head(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head")
        + 4;
    let head = String::from_utf8(bytes[..end].to_vec()).unwrap();
    (head, &bytes[end..])
}

/// Reads a chunked body: its data, its trailer section, and whether it was ended.
fn dechunk(mut rest: &[u8]) -> (Vec<u8>, String, bool) {
    let mut data = Vec::new();
    loop {
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (data, String::new(), false);
        };
        let size = std::str::from_utf8(&rest[..line_end]).unwrap();
        let size = usize::from_str_radix(size, 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            let trailers = String::from_utf8(rest.to_vec()).unwrap();
            let ended = trailers.ends_with("\r\n");
            return (data, trailers, ended);
        }
        if rest.len() < size + 2 {
            data.extend_from_slice(&rest[..size.min(rest.len())]);
            return (data, String::new(), false);
        }
        data.extend_from_slice(&rest[..size]);
        assert_eq!(&rest[size..size + 2], b"\r\n", "chunk data ends with CRLF");
        rest = &rest[size + 2..];
    }
}

fn streamed_steps(large: &Bytes) -> Vec<Step> {
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_static("abc"));
    vec![
        Step::Data(Bytes::from_static(b"hello ")),
        Step::Wait,
        Step::Data(Bytes::new()),
        Step::Data(large.clone()),
        Step::Wait,
        Step::Data(Bytes::from_static(b"world")),
        Step::Trailers(trailers),
    ]
}

#[tokio::test]
async fn a_streamed_body_through_a_trickling_socket_arrives_whole_chunked() {
    // Over the size written from its own buffer, so both ways of writing data are taken.
    let large = Bytes::from(vec![b'x'; 40 * 1024]);
    let expected = [&b"hello "[..], &large, b"world"].concat();
    for takes_trailers in [true, false] {
        let answer_to = AnswerTo {
            takes_trailers,
            ..TO_HTTP11
        };
        let (written, bytes) = write(
            StatusCode::OK,
            scripted(streamed_steps(&large), None),
            answer_to,
        )
        .await;
        assert!(written.unwrap(), "the connection stays open");
        let (head, rest) = split_head(&bytes);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
        assert!(!head.contains("connection:"), "{head}");
        let (data, trailers, ended) = dechunk(rest);
        assert!(ended && data == expected, "takes_trailers {takes_trailers}");
        let expected_trailers = if takes_trailers {
            "x-checksum: abc\r\n\r\n"
        } else {
            "\r\n"
        };
        assert_eq!(trailers, expected_trailers);
    }
}

#[tokio::test]
async fn to_an_http10_client_a_body_of_unknown_length_ends_with_the_connection() {
    let large = Bytes::from(vec![b'y'; 20 * 1024]);
    let answer_to = AnswerTo {
        http10: true,
        takes_trailers: true,
        ..TO_HTTP11
    };
    let (written, bytes) = write(
        StatusCode::OK,
        scripted(streamed_steps(&large), None),
        answer_to,
    )
    .await;
    assert!(!written.unwrap(), "the close ends the body");
    let (head, rest) = split_head(&bytes);
    assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
    assert!(head.contains("connection: close\r\n"), "{head}");
    assert!(!head.contains("transfer-encoding") && !head.contains("content-length"));
    assert_eq!(rest, [&b"hello "[..], &large, b"world"].concat());
}

#[tokio::test]
async fn an_answer_made_here_to_head_has_gets_length_and_no_body() {
    let body = scripted(vec![Step::Data(Bytes::from_static(b"hello"))], Some(5));
    let answer_to = AnswerTo {
        head_only: true,
        ..TO_HTTP11
    };
    let (written, bytes) = write(StatusCode::OK, body, answer_to).await;
    assert!(written.unwrap());
    let (head, rest) = split_head(&bytes);
    assert!(head.contains("content-length: 5\r\n"), "{head}");
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test]
async fn statuses_without_a_body_send_none_even_when_the_body_has_data() {
    for status in [StatusCode::NO_CONTENT, StatusCode::NOT_MODIFIED] {
        let body = scripted(vec![Step::Data(Bytes::from_static(b"stray"))], None);
        let (written, bytes) = write(status, body, TO_HTTP11).await;
        assert!(written.unwrap(), "{status}");
        let (head, rest) = split_head(&bytes);
        assert!(!head.contains("transfer-encoding"), "{head}");
        assert!(rest.is_empty(), "{status}: {rest:?}");
    }
}

#[tokio::test]
async fn a_body_that_breaks_its_length_is_an_error_not_a_short_or_long_answer() {
    let short = scripted(vec![Step::Data(Bytes::from_static(b"four"))], Some(10));
    let (written, bytes) = write(StatusCode::OK, short, TO_HTTP11).await;
    assert!(matches!(written, Err(WriteError::Length)), "{written:?}");
    // The client never has a whole answer of 10 bytes (the connection is closed after it).
    let body_start = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|end| end + 4);
    assert!(
        body_start.is_none_or(|start| bytes.len() - start < 10),
        "{bytes:?}"
    );

    let long = scripted(vec![Step::Data(Bytes::from_static(b"four"))], Some(3));
    let (written, bytes) = write(StatusCode::OK, long, TO_HTTP11).await;
    assert!(matches!(written, Err(WriteError::Length)), "{written:?}");
    // Not even the head: the data was not sent because it broke the length.
    assert!(!bytes.windows(4).any(|w| w == b"four"), "{bytes:?}");
}

#[tokio::test]
async fn a_body_that_fails_midway_leaves_the_chunked_answer_unended() {
    let steps = vec![
        Step::Data(Bytes::from_static(b"partial")),
        Step::Wait,
        Step::Fail,
    ];
    let (written, bytes) = write(StatusCode::OK, scripted(steps, None), TO_HTTP11).await;
    assert!(matches!(written, Err(WriteError::Body(_))), "{written:?}");
    // The client must not take a cut body for a whole one: no last chunk is written.
    let (data, _, ended) = dechunk(split_head(&bytes).1);
    assert_eq!((data.as_slice(), ended), (&b"partial"[..], false));
}

#[tokio::test]
async fn a_client_that_fails_midway_is_a_client_error() {
    let mut io = Trickle::new(7);
    io.fails_after = 20;
    let body = scripted(vec![Step::Data(Bytes::from(vec![b'z'; 1000]))], Some(1000));
    let written = write_response(&mut io, &mut Vec::new(), Response::new(body), TO_HTTP11).await;
    assert!(matches!(written, Err(WriteError::Client(_))), "{written:?}");
    assert_eq!(io.taken.len(), 21);
}

/// A client that takes nothing: its earlier answers fill the socket.
struct Full;

impl AsyncWrite for Full {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Pending
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

/// A watch that tells `closes` in turn, each once woken, then nothing more.
struct Telling(VecDeque<Close>);

impl Watch for Telling {
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Close> {
        match self.0.pop_front() {
            Some(close) => {
                cx.waker().wake_by_ref();
                Poll::Ready(close)
            }
            None => Poll::Pending,
        }
    }
}

#[tokio::test]
async fn a_continue_the_client_takes_nothing_of_is_cut_when_the_watch_says_stalled() {
    let mut watch = Telling([Close::SendStalled].into());
    let mut stopping = false;
    let sent = send_continue(&mut Full, &mut watch, &mut stopping).await;
    assert!(!sent, "the connection must close");

    // A shutdown on the way is remembered, and the continue still goes out (after a stop, the
    // write is bounded by shutdown_grace, not by the watch).
    let mut io = Trickle::new(3);
    let mut watch = Telling([Close::Stop].into());
    let mut stopping = false;
    assert!(send_continue(&mut io, &mut watch, &mut stopping).await);
    assert!(stopping);
    assert_eq!(io.taken, b"HTTP/1.1 100 Continue\r\n\r\n");
}
