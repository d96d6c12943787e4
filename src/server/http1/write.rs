//! Writing a response: its head (the status line, its fields, the gateway's added fields, the
//! framing, `Date`) and its body, delimited as hyper would.

use futures_util::FutureExt;
use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use std::io;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::added_fields::AddedFields;
use crate::http1::encode::{encode_field, hex};
use crate::respond::ResponseBody;
use crate::upstream_fields::UpstreamFields;

/// A response's bytes are gathered up to this much before a write.
const WRITE_BATCH: usize = 64 * 1024;
/// Data frames at least this large are written from their own buffer, not copied.
const WRITE_DIRECT: usize = 16 * 1024;

/// How a response's body is delimited.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Length {
    /// 1xx, 204, 304: no body.
    None,
    Exactly(u64),
    Chunked,
}

/// Why a response was not written whole; the connection closes after it.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    #[error("writing to the client failed: {0}")]
    Client(#[from] io::Error),
    #[error("the response body failed: {0}")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the response body does not match its Content-Length")]
    Length,
    #[error("the client took nothing sent to it within send_timeout")]
    Stalled,
}

/// Writes the response: its head, then its body as it comes, gathered into few writes.
pub(super) async fn write_response<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    response: Response<ResponseBody>,
    keep_alive: bool,
) -> Result<(), WriteError> {
    let (parts, mut body) = response.into_parts();
    let length = body_length(parts.status, &parts.headers, &body);
    out.clear();
    out.reserve(1024);
    encode_head(
        out,
        parts.status,
        &Fields::of(&parts.headers, &body),
        length,
        keep_alive,
    );
    // The bytes still owed under a Content-Length; None when chunked.
    let mut left = match length {
        Length::None => {
            drop(body);
            return flush(io, out).await;
        }
        Length::Exactly(n) => Some(n),
        Length::Chunked => None,
    };
    while let Some(data) = next_data(io, out, &mut body).await? {
        push_data(io, out, data, &mut left).await?;
    }
    // A finished body lets go of its route slot and in-flight count before the response's
    // last bytes go out, as under hyper: a client that sends its next request at once must
    // not find the slot still taken, nor a scrape count the request in flight.
    drop(body);
    match left {
        Some(0) => {}
        Some(_) => return Err(WriteError::Length),
        None => out.extend_from_slice(b"0\r\n\r\n"),
    }
    flush(io, out).await
}

/// The body's next data; what is gathered is written first when none is ready yet. None at
/// the body's end.
async fn next_data<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    body: &mut ResponseBody,
) -> Result<Option<Bytes>, WriteError> {
    loop {
        let frame = match body.frame().now_or_never() {
            Some(frame) => frame,
            None => {
                flush(io, out).await?;
                body.frame().await
            }
        };
        match frame {
            None => return Ok(None),
            Some(Err(error)) => return Err(WriteError::Body(error)),
            // Trailers are sent only to a request with `TE: trailers`, which hyper serves.
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => return Ok(Some(data)),
                _ => {}
            },
        }
    }
}

/// Adds `data` to the response: counted against the length `left`, or framed as a chunk.
/// Large data is written from its own buffer rather than copied.
async fn push_data<S: AsyncWrite + Unpin>(
    io: &mut S,
    out: &mut Vec<u8>,
    data: Bytes,
    left: &mut Option<u64>,
) -> Result<(), WriteError> {
    match left {
        Some(left) => {
            *left = left
                .checked_sub(data.len() as u64)
                .ok_or(WriteError::Length)?
        }
        None => {
            let mut digits = [0u8; 16];
            out.extend_from_slice(hex(data.len(), &mut digits));
            out.extend_from_slice(b"\r\n");
        }
    }
    if data.len() >= WRITE_DIRECT {
        flush(io, out).await?;
        io.write_all(&data).await?;
    } else {
        out.extend_from_slice(&data);
    }
    if left.is_none() {
        out.extend_from_slice(b"\r\n");
    }
    if out.len() >= WRITE_BATCH {
        flush(io, out).await?;
    }
    Ok(())
}

async fn flush<S: AsyncWrite + Unpin>(io: &mut S, out: &mut Vec<u8>) -> Result<(), WriteError> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    Ok(io.flush().await?)
}

/// As hyper decides it: a valid `Content-Length` field, else the body's exact size, else
/// chunked; none for statuses that have no body.
fn body_length(status: StatusCode, headers: &HeaderMap, body: &ResponseBody) -> Length {
    use http_body::Body;
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Length::None;
    }
    let mut fields = headers.get_all(CONTENT_LENGTH).iter();
    let declared = match (fields.next(), fields.next()) {
        (Some(value), None) => std::str::from_utf8(value.as_bytes())
            .ok()
            .and_then(|text| text.parse::<u64>().ok()),
        _ => None,
    };
    match declared.or_else(|| body.size_hint().exact()) {
        Some(n) => Length::Exactly(n),
        None => Length::Chunked,
    }
}

/// A response's fields, from wherever they are kept.
struct Fields<'a> {
    /// The response's header map: a generated response's fields.
    own: &'a HeaderMap,
    /// The content type a generated body sets itself (`ResponseBody::content_type`).
    content_type: Option<&'static str>,
    /// An upstream response's fields, hop-by-hop and framing ones already left out.
    upstream: Option<&'a UpstreamFields>,
    added: &'a AddedFields,
}

/// The status line; the response's fields less its framing, its `Connection` and those the
/// added fields replace; a generated body's content type; the framing; the added fields;
/// `Date` unless the response has one; and `Connection: close` when the connection closes
/// after it.
fn encode_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    fields: &Fields<'_>,
    length: Length,
    keep_alive: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    // A bodiless status keeps a Content-Length (a 304's describes what it stands for) except
    // a 204.
    let keeps_length = length == Length::None && status != StatusCode::NO_CONTENT;
    let has_date = fields.encode(out, keeps_length);
    if let Some(content_type) = fields.content_type {
        encode_field(out, "content-type", content_type.as_bytes());
    }
    match length {
        Length::Exactly(n) => encode_length(out, n),
        Length::Chunked => encode_field(out, "transfer-encoding", b"chunked"),
        Length::None => {}
    }
    out.extend_from_slice(fields.added.lines());
    if !has_date {
        date::with_now(|date| encode_field(out, "date", date));
    }
    if !keep_alive {
        encode_field(out, "connection", b"close");
    }
    out.extend_from_slice(b"\r\n");
}

impl<'a> Fields<'a> {
    /// A response's fields: its header map's and what its body holds.
    fn of(headers: &'a HeaderMap, body: &'a ResponseBody) -> Fields<'a> {
        Fields {
            own: headers,
            content_type: body.content_type(),
            upstream: body.upstream_fields(),
            added: body.added(),
        }
    }

    /// Writes the response's own and upstream fields, less the framing, `Connection`, a
    /// `Content-Type` the body sets and those the added fields replace (a kept Content-Length
    /// only when `keeps_length`); true when one was a `Date`.
    fn encode(&self, out: &mut Vec<u8>, keeps_length: bool) -> bool {
        for (name, value) in self.own {
            // The framing is written by `encode_head`, `Connection` by this server.
            let kept = if name == TRANSFER_ENCODING || name == CONNECTION {
                false
            } else if name == CONTENT_TYPE {
                self.content_type.is_none()
            } else if name == CONTENT_LENGTH {
                keeps_length
            } else {
                !self.added.replaces(name.as_str().as_bytes())
            };
            if kept {
                encode_field(out, name.as_str(), value.as_bytes());
            }
        }
        let mut has_date = self.own.contains_key(http::header::DATE);
        if let Some(upstream) = self.upstream {
            upstream.write_lines(out, self.added);
            has_date |= upstream.has_date();
            if let Some(declared) = upstream.content_length().filter(|_| keeps_length) {
                encode_length(out, declared);
            }
        }
        has_date
    }
}

fn encode_length(out: &mut Vec<u8>, length: u64) {
    encode_field(
        out,
        "content-length",
        itoa::Buffer::new().format(length).as_bytes(),
    );
}

/// The `Date` field, formatted once a second per thread.
mod date {
    use std::cell::RefCell;
    use std::io::Write;
    use std::time::{SystemTime, UNIX_EPOCH};

    thread_local! {
        static CACHED: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
    }

    pub fn with_now(write: impl FnOnce(&[u8])) {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        CACHED.with(|cached| {
            let mut cached = cached.borrow_mut();
            if cached.0 != second {
                cached.1.clear();
                let _ = write!(cached.1, "{}", httpdate::HttpDate::from(now));
                cached.0 = second;
            }
            write(&cached.1);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::added_fields::Added;

    #[test]
    fn a_head_has_the_fields_less_framing_and_replaced_ones_then_the_added_and_its_own() {
        let response = Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/plain")
            .header("content-length", "2")
            .header("transfer-encoding", "chunked")
            .header("connection", "keep-alive")
            .header("x-request-id", "upstream")
            .body(ResponseBody::generated(Bytes::from_static(b"ok")))
            .unwrap();
        let (parts, mut body) = response.into_parts();
        body.added_mut().add_value(Added::RequestId, b"ours");
        let length = body_length(parts.status, &parts.headers, &body);
        assert_eq!(length, Length::Exactly(2));
        let mut out = Vec::new();
        let fields = Fields::of(&parts.headers, &body);
        encode_head(&mut out, parts.status, &fields, length, false);
        let text = String::from_utf8(out).unwrap();
        let (before_date, date) = text.split_once("date: ").unwrap();
        assert_eq!(
            before_date,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nx-request-id: ours\r\n"
        );
        assert!(
            date.ends_with(" GMT\r\nconnection: close\r\n\r\n"),
            "{date}"
        );

        let mut no_content = Response::new(ResponseBody::generated(Bytes::new()));
        *no_content.status_mut() = StatusCode::NO_CONTENT;
        no_content
            .headers_mut()
            .insert("content-length", "0".parse().unwrap());
        let (parts, body) = no_content.into_parts();
        assert_eq!(
            body_length(parts.status, &parts.headers, &body),
            Length::None
        );
        let mut out = Vec::new();
        let fields = Fields::of(&parts.headers, &body);
        encode_head(&mut out, parts.status, &fields, Length::None, true);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 204 No Content\r\ndate: "),
            "{text}"
        );
        assert!(!text.contains("content-length") && !text.contains("connection"));
    }

    #[test]
    fn a_problems_head_has_its_content_type_once_in_place_of_the_maps() {
        let mut problem = Response::new(ResponseBody::problem(Bytes::from_static(b"{}")));
        problem
            .headers_mut()
            .insert("content-type", "text/plain".parse().unwrap());
        let (parts, body) = problem.into_parts();
        let mut out = Vec::new();
        let fields = Fields::of(&parts.headers, &body);
        encode_head(&mut out, parts.status, &fields, Length::Exactly(2), true);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "HTTP/1.1 200 OK\r\ncontent-type: application/problem+json\r\ncontent-length: 2\r\n"
            ),
            "{text}"
        );
        assert_eq!(text.matches("content-type").count(), 1, "{text}");
        let through_hyper = ResponseBody::with_fields_in_headers(Response::from_parts(parts, body));
        assert_eq!(
            through_hyper
                .headers()
                .get_all("content-type")
                .iter()
                .collect::<Vec<_>>(),
            ["application/problem+json"]
        );
    }

    #[test]
    fn an_upstream_head_has_its_lines_less_replaced_ones_its_date_and_a_304s_length() {
        let mut upstream = UpstreamFields::with_capacity(64);
        upstream.push(b"Content-Type", b"text/plain");
        upstream.push(b"X-Request-Id", b"theirs");
        upstream.push(b"Date", b"Tue, 01 Dec 2026 03:00:00 GMT");
        upstream.set_content_length(Some(7));
        let mut added = AddedFields::default();
        added.add_value(Added::RequestId, b"ours");
        let own = HeaderMap::new();
        let fields = Fields {
            own: &own,
            content_type: None,
            upstream: Some(&upstream),
            added: &added,
        };
        let head = |status, length| {
            let mut out = Vec::new();
            encode_head(&mut out, status, &fields, length, true);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            head(StatusCode::OK, Length::Exactly(2)),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Tue, 01 Dec 2026 03:00:00 GMT\r\n\
             content-length: 2\r\nx-request-id: ours\r\n\r\n"
        );
        assert_eq!(
            head(StatusCode::NOT_MODIFIED, Length::None),
            "HTTP/1.1 304 Not Modified\r\nContent-Type: text/plain\r\n\
             Date: Tue, 01 Dec 2026 03:00:00 GMT\r\ncontent-length: 7\r\nx-request-id: ours\r\n\r\n"
        );
        assert!(!head(StatusCode::NO_CONTENT, Length::None).contains("content-length"));
    }

    /// Records what the in-flight gauge said at each write.
    struct Recorder {
        bytes: Vec<u8>,
        in_flight_at_writes: Vec<i64>,
        in_flight: prometheus_client::metrics::gauge::Gauge,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            let now = self.in_flight.get();
            self.in_flight_at_writes.push(now);
            self.bytes.extend_from_slice(buf);
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_request_leaves_in_flight_before_its_last_bytes_are_written() {
        use crate::metrics::{LabelText, Metrics, RouteLabel};
        let metrics = Metrics::new();
        let route = metrics.route("r");
        let label = RouteLabel {
            route: LabelText::from("r"),
        };
        for (status, body) in [(StatusCode::OK, "ok"), (StatusCode::NO_CONTENT, "")] {
            let mut body = ResponseBody::generated(Bytes::from(body));
            body.hold(None, route.enter());
            let mut response = Response::new(body);
            *response.status_mut() = status;
            let mut io = Recorder {
                bytes: Vec::new(),
                in_flight_at_writes: Vec::new(),
                in_flight: metrics.in_flight.get_or_create(&label).clone(),
            };
            write_response(&mut io, &mut Vec::new(), response, true)
                .await
                .unwrap();
            assert_eq!(io.in_flight_at_writes.last(), Some(&0), "{status}");
            assert!(io.bytes.ends_with(body_end(status)), "{status}");
        }
    }

    fn body_end(status: StatusCode) -> &'static [u8] {
        if status == StatusCode::OK {
            b"\r\n\r\nok"
        } else {
            b"\r\n\r\n"
        }
    }
}
