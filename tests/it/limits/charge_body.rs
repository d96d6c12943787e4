//! Limits settled by the usage an answer's body reports: a JSON body, an event stream whose
//! last event carries `usage` (reaching the client byte for byte), summed fields, bodies that
//! cannot tell, and a client that leaves before the end.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use support::*;

use super::charge::{call, charged_gateway, header, settles, units};

/// An upstream answering every request with `body` of `content_type`, in `chunks` pieces of
/// a chunked body (so the scan sees it split), with `extra` fields.
async fn body_upstream(
    content_type: &'static str,
    body: &'static [u8],
    chunks: usize,
    extra: &'static [(&'static str, &'static str)],
) -> TestUpstream {
    TestUpstream::start(move |_| async move {
        let size = body.len().div_ceil(chunks).max(1);
        let frames: Vec<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>> = body
            .chunks(size)
            .map(|chunk| Ok(Frame::data(Bytes::from_static(chunk))))
            .collect();
        let stream = futures_util::stream::iter(frames);
        let mut response = Response::new(StreamBody::new(stream).boxed());
        let headers = response.headers_mut();
        headers.insert("content-type", content_type.parse().unwrap());
        for (name, value) in extra {
            headers.insert(*name, value.parse().unwrap());
        }
        // `x-status` names the answer's status.
        if let Some(status) = response.headers_mut().remove("x-status") {
            *response.status_mut() = StatusCode::from_bytes(status.as_bytes()).unwrap();
        }
        response
    })
    .await
}

fn clock() -> Arc<ratelimit_proxy::testing::ManualClock> {
    Arc::new(ratelimit_proxy::testing::ManualClock::new())
}

const TOKENS: &str = "algorithm = \"fixed_window\"\nrates = [{ limit = 100, per = \"1m\" }]\n";

#[tokio::test]
async fn a_json_body_settles_at_its_usage_and_the_next_answer_shows_it() {
    let body =
        br#"{"id":"c1","choices":[{"text":"hi"}],"usage":{"prompt_tokens":12,"total_tokens":40}}"#;
    let upstream = body_upstream("application/json; charset=utf-8", body, 7, &[]).await;
    let limit =
        format!("{TOKENS}charge = {{ reserve = 10, settle = \"json:usage.total_tokens\" }}");
    let gateway = charged_gateway(&upstream.url(), &limit, clock()).await;
    let (first, received) = call(&gateway, "k").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(&received[..], &body[..]);
    assert_eq!(header(&first, "x-ratelimit-remaining"), "90");
    // Settled at 40 when the body ended, before the client read its end: the next answer
    // shows 40 + its own reservation of 10.
    let (second, _) = call(&gateway, "k").await;
    assert_eq!(header(&second, "x-ratelimit-remaining"), "50");
    // Each settled 30 over its reservation.
    assert_eq!(settles(&gateway, "settled").await, 2.0);
    assert_eq!(units(&gateway, "debt").await, 60.0);
}

#[tokio::test]
async fn an_event_stream_settles_by_its_last_usage_and_reaches_the_client_byte_for_byte() {
    let stream: &'static [u8] = b": keep-alive\r\n\r\n\
data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\r\n\r\n\
event: message_delta\n\
data: {\"usage\":{\"input_tokens\":5,\n\
data: \"output_tokens\":9}}\n\n\
data: [DONE]\n\n";
    let upstream = body_upstream("text/event-stream", stream, 13, &[]).await;
    let limit = format!(
        "{TOKENS}charge = {{ reserve = 20, settle = [\"json:usage.input_tokens\", \"json:usage.output_tokens\"] }}"
    );
    let gateway = charged_gateway(&upstream.url(), &limit, clock()).await;
    let (first, received) = call(&gateway, "k").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(&received[..], stream);
    // Summed: 5 + 9 = 14, a refund of 6.
    assert_eq!(
        header(&call(&gateway, "k").await.0, "x-ratelimit-remaining"),
        "66"
    );
    assert_eq!(units(&gateway, "refunded").await, 2.0 * 6.0);
}

/// A content type, a body, extra fields, and the outcome they make.
type Case = (
    &'static str,
    &'static [u8],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[tokio::test]
async fn bodies_that_cannot_tell_their_usage_leave_the_reservation_standing() {
    let cases: [Case; 6] = [
        ("application/json", br#"{"usage":{}}"#, &[], "missing"),
        (
            "application/json",
            br#"{"usage":{"total_tokens":-3}}"#,
            &[],
            "invalid",
        ),
        (
            "application/json",
            br#"{"usage":{"total_tokens":3}"#,
            &[],
            "malformed",
        ),
        ("text/plain", b"total_tokens: 3", &[], "unscannable"),
        (
            "application/json",
            br#"{"usage":{"total_tokens":0}}"#,
            &[("x-status", "206"), ("content-range", "bytes 8-35/60")],
            "unscannable",
        ),
        (
            "application/json",
            br#"{"usage":{"total_tokens":3}}"#,
            &[("content-encoding", "gzip")],
            "unscannable",
        ),
    ];
    for (content_type, body, extra, outcome) in cases {
        let upstream = body_upstream(content_type, body, 3, extra).await;
        let limit =
            format!("{TOKENS}charge = {{ reserve = 10, settle = \"json:usage.total_tokens\" }}");
        let gateway = charged_gateway(&upstream.url(), &limit, clock()).await;
        let (first, received) = call(&gateway, "k").await;
        assert_eq!(&received[..], body, "{outcome}");
        assert_eq!(header(&first, "x-ratelimit-remaining"), "90");
        let (second, _) = call(&gateway, "k").await;
        assert_eq!(header(&second, "x-ratelimit-remaining"), "80", "{outcome}");
        assert_eq!(settles(&gateway, outcome).await, 2.0, "{outcome}");
        assert_eq!(units(&gateway, "refunded").await, 0.0, "{outcome}");
    }
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_keeps_the_reservation() {
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let receiver = Arc::new(tokio::sync::Mutex::new(Some(receiver)));
    let upstream = TestUpstream::start(move |_| {
        let receiver = receiver.clone();
        async move {
            let receiver = receiver.lock().await.take().expect("one request");
            let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
                let chunk = receiver.recv().await?;
                Some((
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Frame::data(chunk)),
                    receiver,
                ))
            });
            let mut response = Response::new(StreamBody::new(stream).boxed());
            let headers = response.headers_mut();
            headers.insert("content-type", "text/event-stream".parse().unwrap());
            response
        }
    })
    .await;
    let limit =
        format!("{TOKENS}charge = {{ reserve = 10, settle = \"json:usage.total_tokens\" }}");
    let gateway = charged_gateway(&upstream.url(), &limit, clock()).await;
    let request = Request::get(gateway.url("/")).header("x-api-key", "k");
    let response = client()
        .request(request.body(empty()).unwrap())
        .await
        .unwrap();
    let mut body = response.into_body();
    sender
        .send(Bytes::from_static(
            b"data: {\"usage\":{\"total_tokens\":1}}\n\n",
        ))
        .unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert!(frame.is_data());
    drop(body);
    // Seen: a usage of 1, but not the end: the reservation of 10 stands. The gateway learns
    // the client is gone when it next writes to it.
    assert!(
        eventually_async(Duration::from_secs(10), async || {
            let _ = sender.send(Bytes::from_static(b": more\n\n"));
            settles(&gateway, "incomplete").await == 1.0
        })
        .await
    );
    drop(sender);
    assert_eq!(units(&gateway, "refunded").await, 0.0);
    assert_eq!(units(&gateway, "settled").await, 10.0);
}

#[tokio::test]
async fn a_client_cannot_have_the_answer_compressed_or_cut_out_of_the_scanners_sight() {
    let (upstream, mut received) = recording::recording_upstream().await;
    let limit =
        format!("{TOKENS}charge = {{ reserve = 10, settle = \"json:usage.total_tokens\" }}");
    let gateway = charged_gateway(&upstream.url(), &limit, clock()).await;
    // Raw bytes, so that every spelling reaches the gateway as written.
    let raw = "GET / HTTP/1.1\r\nhost: api\r\nx-api-key: k\r\nAccept-Encoding: gzip\r\n\
               accept-encoding: br;q=1, identity;q=0\r\nACCEPT-ENCODING: zstd\r\n\
               Range: bytes=8-35\r\nIF-RANGE: \"v1\"\r\nconnection: close\r\n\r\n";
    let answer = exchange_until_closed(gateway.addr, raw.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = recording::drain(&mut received);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].all("accept-encoding"), ["identity"]);
    // Nor a part of it read as the whole.
    assert!(got[0].all("range").is_empty() && got[0].all("if-range").is_empty());
    // A limit that settles by a header leaves the client's choice alone.
    let (upstream, mut received) = recording::recording_upstream().await;
    let limit = format!("{TOKENS}charge = {{ reserve = 10, settle = \"header:x-usage\" }}");
    let gateway = charged_gateway(&upstream.url(), &limit, clock()).await;
    exchange_until_closed(gateway.addr, raw.as_bytes()).await;
    let got = recording::drain(&mut received);
    assert_eq!(got[0].all("accept-encoding").len(), 3);
    assert_eq!(got[0].all("range"), ["bytes=8-35"]);
}
