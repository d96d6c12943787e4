use super::*;
use crate::fields::added::Added;
use http::StatusCode;

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
    encode_head(&mut out, parts.status, &fields, length, (false, false));
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
    encode_head(&mut out, parts.status, &fields, Length::None, (true, false));
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
    encode_head(
        &mut out,
        parts.status,
        &fields,
        Length::Exactly(2),
        (true, false),
    );
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
        encode_head(&mut out, status, &fields, length, (true, false));
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
        let answer_to = AnswerTo {
            keep_alive: true,
            head_only: false,
            http10: false,
            takes_trailers: false,
        };
        write_response(&mut io, &mut Vec::new(), response, answer_to)
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
