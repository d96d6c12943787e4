//! The server's reading against hyper's HTTP/1 server on the same bytes, and its codec under
//! scripted partial reads (no sockets).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use http_body::Body;

use proptest::collection::vec;
use proptest::prelude::*;

use super::reader::{Pumped, Reader};
use crate::http1::request_body::server_body;
use crate::http1::request_head::{ReadRequest, read_for_fuzzing};
use crate::request::canonical::ProxyRequest;
use crate::testing::fuzz::request_head::{Compared, compare, read_by_hyper};

/// Requests both servers read alike: method, target, version, fields and body bytes.
const READ_ALIKE: &[&str] = &[
    "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET /x?y=1 HTTP/1.0\r\n\r\n",
    "HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    "POST /p HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
    "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello",
    "POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=\"v\"\r\nhello\r\n0\r\nx-sum: 1\r\n\r\n",
    "POST /p HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n",
    "POST /p HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
    "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET http://a.example/x HTTP/1.1\r\nHost: b\r\n\r\n",
    // Cut short: both read the head and fail the body.
    "POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
    "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
    // Malformed: both refuse.
    "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
    "GET / HTTP/1.1\r\n Host: a\r\n\r\n",
    "GET / HTTP/2.0\r\n\r\n",
    "GET / HTTP/1.x\r\n\r\n",
    "GET / http/1.1\r\n\r\n",
    "GET / HTTP/1.10\r\n\r\n",
    "GET /\x01 HTTP/1.1\r\n\r\n",
    "POST /p HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    "POST /p HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "POST /p HTTP/1.1\r\nContent-Length: 0x5\r\n\r\nhello",
    "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
    "POST /p HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    // Incomplete: both wait.
    "GET / HTTP/1.1\r\nHost: a\r\n",
];

/// Requests the own server refuses and hyper reads, each for a reason RFC 9112 gives.
const STRICTER_BY_DESIGN: &[(&str, &str)] = &[
    (
        "POST /p HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
        "RFC 9110 §8.6",
    ),
    (
        "POST /p HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "RFC 9112 §6.3 item 3",
    ),
    (
        "POST /p HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "RFC 9112 §6.1",
    ),
    (
        "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "RFC 9112 §6.1",
    ),
    // Found by fuzz/request_head: hyper ends the body at the bare LF after the last chunk.
    (
        "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\nGET / HTTP/1.1\r\n\r\n",
        "RFC 9112 §7.1",
    ),
];

#[test]
fn hand_picked_requests_are_read_as_hyper_reads_them() {
    for bytes in READ_ALIKE {
        match compare(bytes.as_bytes()) {
            Ok(Compared::Same) => {}
            other => panic!("{bytes:?}: {other:?}"),
        }
    }
}

/// hyper answers 400 to `HTTP/1.2`; the own server reads it as the HTTP/1.1 request it is
/// (RFC 9110 §2.5), and `compare` gives hyper the same bytes as `HTTP/1.1`.
#[test]
fn a_higher_minor_version_is_read_as_http11_where_hyper_refuses_it() {
    let bytes = b"POST /p HTTP/1.2\r\nHost: a\r\nContent-Length: 2\r\n\r\nok";
    assert!(read_by_hyper(bytes).is_none(), "hyper refuses HTTP/1.2");
    match read_for_fuzzing::<ProxyRequest>(bytes) {
        ReadRequest::Request(request, Ok(body)) => {
            assert_eq!(
                (request.version, &body[..]),
                (http::Version::HTTP_11, &b"ok"[..])
            );
        }
        _ => panic!("HTTP/1.2 not read"),
    }
    assert!(matches!(compare(bytes), Ok(Compared::Same)));
}

#[test]
fn chunked_applied_twice_is_a_framing_error_not_an_unknown_coding() {
    let bytes = b"POST /p HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n";
    match read_for_fuzzing::<ProxyRequest>(bytes) {
        ReadRequest::Refused(crate::http1::HeadError::Framing(reason)) => {
            assert_eq!(reason, "chunked applied more than once");
        }
        _ => panic!("not refused as framing"),
    }
}

#[test]
fn where_the_server_is_stricter_than_hyper_it_is_for_a_stated_rule() {
    for (bytes, section) in STRICTER_BY_DESIGN {
        match compare(bytes.as_bytes()) {
            Ok(Compared::StricterByDesign(rule)) => assert!(rule.starts_with(section), "{rule}"),
            other => panic!("{bytes:?}: {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Requests built from the parts smuggling attempts use, in any combination.
    #[test]
    fn generated_requests_are_read_as_hyper_reads_them(
        method in prop_oneof![Just("GET"), Just("POST"), Just("HEAD"), Just("PUT")],
        version in prop_oneof![Just("1.1"), Just("1.0"), Just("1.2")],
        fields in vec(prop_oneof![
            Just("Host: a".to_owned()),
            Just("Content-Length: 3".to_owned()),
            Just("Content-Length: 0".to_owned()),
            Just("Content-Length: 3, 3".to_owned()),
            Just("Content-Length: +3".to_owned()),
            Just("Transfer-Encoding: chunked".to_owned()),
            Just("Transfer-Encoding: identity".to_owned()),
            Just("Connection: close".to_owned()),
            Just("Connection: keep-alive".to_owned()),
            Just("Expect: 100-continue".to_owned()),
            "x-[a-z]{1,6}: [ -~]{0,12}",
        ], 0..5),
        body in prop_oneof![
            Just("abc".to_owned()),
            Just("3\r\nabc\r\n0\r\n\r\n".to_owned()),
            Just("3\nabc\n0\n\n".to_owned()),
            Just(String::new()),
            "[ -~\r\n]{0,24}",
        ],
    ) {
        let mut text = format!("{method} /t HTTP/{version}\r\n");
        for field in &fields {
            text.push_str(field);
            text.push_str("\r\n");
        }
        text.push_str("\r\n");
        text.push_str(&body);
        if let Err(finding) = compare(text.as_bytes()) {
            prop_assert!(false, "{text:?}: {finding}");
        }
    }

    #[test]
    fn any_bytes_are_read_as_hyper_reads_them(bytes in vec(any::<u8>(), 0..200)) {
        if let Err(finding) = compare(&bytes) {
            prop_assert!(false, "{:?}: {finding}", String::from_utf8_lossy(&bytes));
        }
    }
}

/// A reader over a scripted client that sends `reads`, one piece per read.
fn scripted(reads: &[&[u8]]) -> Reader<tokio_test::io::Mock> {
    let mut client = tokio_test::io::Builder::new();
    for piece in reads {
        client.read(piece);
    }
    let (read_half, _write_half) = tokio::io::split(client.build());
    std::mem::forget(_write_half);
    Reader::new(read_half, BytesMut::new())
}

/// Pumps `reader` while `body` is read to its end; the body's bytes, or its error.
async fn read_body(
    reader: &mut Reader<tokio_test::io::Mock>,
    body: &mut crate::http1::request_body::ServerBody,
) -> Result<Vec<u8>, String> {
    let mut data = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| {
            let polled = Pin::new(&mut *body).poll_frame(cx);
            if polled.is_pending() {
                // The client's bytes arrive as the body asks for them.
                if let Poll::Ready(pumped) = reader.poll_pump(cx) {
                    assert_eq!(pumped, Pumped::Closed);
                    return Pin::new(&mut *body).poll_frame(cx);
                }
            }
            polled
        })
        .await;
        match frame {
            None => return Ok(data),
            Some(Ok(frame)) => {
                if let Ok(bytes) = frame.into_data() {
                    data.extend_from_slice(&bytes);
                }
            }
            Some(Err(error)) => return Err(error.to_string()),
        }
    }
}

#[tokio::test]
async fn a_chunked_body_split_across_reads_arrives_whole_and_the_next_request_stays() {
    let mut reader = scripted(&[
        b"5\r\nhe",
        b"llo\r\n",
        b"3;x=1\r\nabc\r\n0\r\n",
        b"\r\nGET /next",
    ]);
    let (feed, mut body) = server_body(None);
    reader.feed_body(feed, None, false);
    assert_eq!(
        read_body(&mut reader, &mut body).await.unwrap(),
        b"helloabc"
    );
    assert!(reader.body_done());
    // Read ahead once the body is done, not as part of it.
    let waker = futures_util::task::noop_waker();
    let _ = reader.poll_pump(&mut Context::from_waker(&waker));
    assert_eq!(&reader.read[..], b"GET /next");
}

#[tokio::test]
async fn a_length_body_stops_at_its_length_and_a_cut_one_is_an_error() {
    let mut reader = scripted(&[b"ab", b"cdeGET"]);
    let (feed, mut body) = server_body(Some(5));
    reader.feed_body(feed, Some(5), false);
    assert_eq!(read_body(&mut reader, &mut body).await.unwrap(), b"abcde");
    assert_eq!(&reader.read[..], b"GET");

    let mut reader = scripted(&[b"ab"]);
    let (feed, mut body) = server_body(Some(5));
    reader.feed_body(feed, Some(5), false);
    let error = read_body(&mut reader, &mut body).await.unwrap_err();
    assert!(error.contains("closed the connection"), "{error}");
    assert!(!reader.body_done());
}

#[tokio::test]
async fn a_broken_chunk_line_fails_the_body_and_the_connection() {
    let mut reader = scripted(&[b"5\nhello\r\n0\r\n\r\n"]);
    let (feed, mut body) = server_body(None);
    reader.feed_body(feed, None, false);
    let error = read_body(&mut reader, &mut body).await.unwrap_err();
    assert!(error.contains("bare LF"), "{error}");
    assert!(!reader.body_done());
}

#[tokio::test]
async fn continue_is_asked_for_only_when_the_body_is_wanted_and_not_yet_sent() {
    let waker = futures_util::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut reader = scripted(&[b"ok"]);
    let (feed, mut body) = server_body(Some(2));
    reader.feed_body(feed, Some(2), true);
    // Not wanted yet: nothing is read and no 100 goes out.
    assert!(reader.poll_pump(&mut cx).is_pending());
    assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
    assert_eq!(reader.poll_pump(&mut cx), Poll::Ready(Pumped::SendContinue));
    assert_eq!(read_body(&mut reader, &mut body).await.unwrap(), b"ok");

    // A client that sent the body without waiting gets no 100.
    let mut reader = scripted(&[b"ok"]);
    let (feed, mut body) = server_body(Some(2));
    reader.feed_body(feed, Some(2), false);
    assert_eq!(read_body(&mut reader, &mut body).await.unwrap(), b"ok");
}

#[tokio::test]
async fn an_abandoned_body_already_buffered_is_skipped_for_the_next_request() {
    let mut reader = scripted(&[]);
    reader
        .read
        .extend_from_slice(b"3\r\nabc\r\n0\r\n\r\nGET /next");
    let (feed, body) = server_body(None);
    reader.feed_body(feed, None, false);
    drop(body);
    assert!(reader.body_done());
    assert_eq!(&reader.read[..], b"GET /next");

    let mut reader = scripted(&[]);
    reader.read.extend_from_slice(b"3\r\nab");
    let (feed, body) = server_body(None);
    reader.feed_body(feed, None, false);
    drop(body);
    assert!(!reader.body_done());
}
