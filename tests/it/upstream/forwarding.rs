//! Forwarding end to end: bodies both ways, streaming, HEAD/204/304, header rewriting and
//! request ids, through the real gateway to in-process upstreams.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use support::*;
use tokio::sync::{Mutex, Notify, mpsc};

/// An upstream that streams every request body back.
async fn echo_upstream() -> TestUpstream {
    TestUpstream::start(|request| async move {
        Response::new(request.into_body().map_err(Into::into).boxed())
    })
    .await
}

fn pseudo_random_bytes(len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..len).map(|_| rng.u8(..)).collect()
}

#[tokio::test]
async fn get_and_multi_megabyte_post_round_trip_intact() {
    let upstream = echo_upstream().await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;

    let (response, body) = get(&gateway.url("/plain")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(body.is_empty());

    let sent = pseudo_random_bytes(8 * 1024 * 1024 + 13);
    let request = Request::post(gateway.url("/upload"))
        .body(full(sent.clone()))
        .unwrap();
    let (response, received) = send(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(received.len(), sent.len());
    assert!(received == sent, "the body came back changed");
}

#[tokio::test]
async fn the_first_chunk_reaches_the_client_before_the_upstream_sends_the_last() {
    let release = Arc::new(Notify::new());
    let upstream_release = release.clone();
    let upstream = TestUpstream::start(move |_| {
        let release = upstream_release.clone();
        async move {
            let (tx, rx) =
                mpsc::channel::<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>(2);
            tokio::spawn(async move {
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(b"first;"))))
                    .await;
                release.notified().await;
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"last")))).await;
            });
            let stream = tokio_stream_from(rx);
            Response::new(StreamBody::new(stream).boxed())
        }
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;

    let response = client()
        .request(Request::get(gateway.url("/stream")).body(empty()).unwrap())
        .await
        .unwrap();
    assert!(response.headers().get("content-length").is_none());
    let mut body = response.into_body();
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("first chunk arrived while the upstream still holds the last")
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "first;");
    release.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "last");
}

/// Adapts an mpsc receiver into a stream without pulling in tokio-stream.
fn tokio_stream_from<T: Send + 'static>(
    rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

#[tokio::test]
async fn an_upload_is_backpressured_not_buffered() {
    // The upstream reads nothing until released; the gateway must stop taking bytes from the
    // client after a few socket buffers' worth instead of buffering the upload in memory.
    let release = Arc::new(Notify::new());
    let received = Arc::new(AtomicUsize::new(0));
    let (upstream_release, upstream_received) = (release.clone(), received.clone());
    let upstream = TestUpstream::start(move |request| {
        let (release, received) = (upstream_release.clone(), upstream_received.clone());
        async move {
            release.notified().await;
            let mut body = request.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(data) = frame.data_ref() {
                    received.fetch_add(data.len(), Ordering::SeqCst);
                }
            }
            Response::new(full("done"))
        }
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(
        &[upstream.url()],
        "response_timeout = \"60s\"",
    ))
    .await;

    let (tx, rx) =
        mpsc::channel::<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>>(1);
    let request = Request::post(gateway.url("/upload"))
        .body(StreamBody::new(tokio_stream_from(rx)).boxed())
        .unwrap();
    let answer = tokio::spawn(send(request));
    let chunk = Bytes::from(vec![7u8; 64 * 1024]);
    let mut accepted = 0usize;
    let total = 256 * 1024 * 1024;
    let stalled = loop {
        match tokio::time::timeout(
            Duration::from_millis(500),
            tx.send(Ok(Frame::data(chunk.clone()))),
        )
        .await
        {
            Ok(Ok(())) => accepted += chunk.len(),
            Ok(Err(_)) => panic!("the request body was dropped"),
            Err(_) => break true,
        }
        if accepted >= total {
            break false;
        }
    };
    assert!(
        stalled,
        "the gateway took all {total} bytes while the upstream read none"
    );
    assert!(
        accepted < 48 * 1024 * 1024,
        "the gateway buffered {accepted} bytes"
    );

    release.notify_one();
    let rest = tokio::spawn(async move {
        let mut sent = accepted;
        while sent < 64 * 1024 * 1024 {
            tx.send(Ok(Frame::data(chunk.clone()))).await.unwrap();
            sent += chunk.len();
        }
        sent
    });
    let sent = rest.await.unwrap();
    let (response, body) = answer.await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body, "done");
    assert_eq!(received.load(Ordering::SeqCst), sent);
}

#[tokio::test]
async fn head_204_and_304_carry_no_body() {
    let upstream = TestUpstream::start(|request| async move {
        let status = match request.uri().path() {
            "/no-content" => StatusCode::NO_CONTENT,
            "/not-modified" => StatusCode::NOT_MODIFIED,
            _ => StatusCode::OK,
        };
        let mut response = Response::new(if status == StatusCode::OK {
            full("twelve bytes")
        } else {
            empty()
        });
        *response.status_mut() = status;
        response
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;

    let (response, body) = send(Request::head(gateway.url("/doc")).body(empty()).unwrap()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-length"], "12");
    assert!(body.is_empty());
    for (path, status) in [
        ("/no-content", StatusCode::NO_CONTENT),
        ("/not-modified", StatusCode::NOT_MODIFIED),
    ] {
        let (response, body) = get(&gateway.url(path)).await;
        assert_eq!(response.status(), status);
        assert!(body.is_empty());
    }
    // The connection stays usable after bodiless answers.
    let (response, body) = get(&gateway.url("/doc")).await;
    assert_answer(&response, &body, StatusCode::OK, "twelve bytes", "");
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_both_ways_and_forwarded_headers_set() {
    let seen = Arc::new(Mutex::new(None));
    let upstream_seen = seen.clone();
    let upstream = TestUpstream::start(move |request| {
        let seen = upstream_seen.clone();
        async move {
            *seen.lock().await = Some(request.headers().clone());
            Response::builder()
                .header("connection", "x-upstream-hop")
                .header("x-upstream-hop", "1")
                .header("keep-alive", "timeout=5")
                .header("proxy-authenticate", "Basic")
                .header("x-kept", "yes")
                .body(full("ok"))
                .unwrap()
        }
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;

    let request = Request::get(gateway.url("/h"))
        .header("host", "api.example.com")
        .header("connection", "keep-alive, x-client-hop")
        .header("x-client-hop", "1")
        .header("keep-alive", "timeout=5")
        .header("te", "trailers")
        .header("trailer", "x-sum")
        .header("proxy-authorization", "Basic abc")
        .header("x-forwarded-for", "203.0.113.9")
        .header("x-forwarded-proto", "gopher")
        .header("x-end-to-end", "kept")
        .body(empty())
        .unwrap();
    let (response, _) = send(request).await;
    assert_eq!(response.status(), StatusCode::OK);
    for gone in ["x-upstream-hop", "keep-alive", "proxy-authenticate"] {
        assert!(
            response.headers().get(gone).is_none(),
            "{gone} reached the client"
        );
    }
    assert_eq!(response.headers()["x-kept"], "yes");

    let upstream_headers = seen.lock().await.take().expect("upstream saw the request");
    for gone in [
        "x-client-hop",
        "keep-alive",
        "te",
        "trailer",
        "proxy-authorization",
        "upgrade",
        "transfer-encoding",
    ] {
        assert!(
            upstream_headers.get(gone).is_none(),
            "{gone} reached the upstream"
        );
    }
    assert_ne!(
        upstream_headers.get("connection").map(|v| v.as_bytes()),
        Some(&b"keep-alive, x-client-hop"[..])
    );
    assert_eq!(upstream_headers["x-end-to-end"], "kept");
    assert_eq!(upstream_headers["host"], "api.example.com");
    assert_eq!(upstream_headers["x-forwarded-host"], "api.example.com");
    // The peer is not a trusted proxy: the address it claims is replaced, not passed on.
    assert_eq!(upstream_headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(upstream_headers["x-forwarded-proto"], "http");
}

#[tokio::test]
async fn request_id_is_kept_when_sane_and_minted_otherwise() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream_seen = seen.clone();
    let upstream = TestUpstream::start(move |request| {
        let seen = upstream_seen.clone();
        async move {
            let id = request.headers().get("x-request-id").cloned();
            seen.lock().await.push(id);
            Response::new(full("ok"))
        }
    })
    .await;
    let gateway = TestGateway::start(&one_route_config(&[upstream.url()], "")).await;

    let (kept, _) = send(
        Request::get(gateway.url("/"))
            .header("x-request-id", "trace-42")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(kept.headers()["x-request-id"], "trace-42");

    let too_long = "a".repeat(129);
    let (replaced, _) = send(
        Request::get(gateway.url("/"))
            .header("x-request-id", too_long.as_str())
            .body(empty())
            .unwrap(),
    )
    .await;
    let minted_for_long = replaced.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(minted_for_long, too_long);

    let (minted, _) = get(&gateway.url("/")).await;
    let minted = minted.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(minted.len(), 32);
    assert_ne!(minted, minted_for_long);

    let upstream_ids: Vec<String> = seen
        .lock()
        .await
        .iter()
        .map(|id| id.as_ref().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        upstream_ids,
        ["trace-42".to_string(), minted_for_long, minted]
    );
}

#[tokio::test]
async fn routes_match_by_host_prefix_and_method_and_the_rest_is_404() {
    let login = TestUpstream::ok("login").await;
    let api = TestUpstream::ok("api").await;
    let config = format!(
        r#"
[[upstreams]]
name = "login"
servers = ["{}"]
[[upstreams]]
name = "api"
servers = ["{}"]
[[routes]]
name = "login"
path_prefix = "/login"
methods = ["POST"]
upstream = "login"
[[routes]]
name = "api"
host = "api.example.com"
path_prefix = "/v1/"
upstream = "api"
"#,
        login.url(),
        api.url()
    );
    let gateway = TestGateway::start(&config).await;

    let (response, body) = send(
        Request::post(gateway.url("/login"))
            .body(full("u=1"))
            .unwrap(),
    )
    .await;
    assert_answer(&response, &body, StatusCode::OK, "login", "");
    let request = Request::get(gateway.url("/v1/things"))
        .header("host", "API.example.com:443")
        .body(empty())
        .unwrap();
    let (response, body) = send(request).await;
    assert_answer(&response, &body, StatusCode::OK, "api", "");

    for request in [
        Request::get(gateway.url("/login")).body(empty()).unwrap(),
        Request::get(gateway.url("/v1/things"))
            .header("host", "other.example.com")
            .body(empty())
            .unwrap(),
    ] {
        let (response, body) = send(request).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let problem = problem(&response, &body);
        assert!(
            problem["detail"].as_str().unwrap().contains("no route"),
            "{problem}"
        );
    }
    assert_eq!(login.hits() + api.hits(), 2);
}
