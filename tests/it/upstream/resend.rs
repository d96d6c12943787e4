//! A request whose pooled upstream connection closes before any answer is sent again once, on
//! a new connection: never down every idle connection, each of which would run it again. An
//! upstream that closes the connection of a request it fails to answer (a worker killed by its
//! timeout) runs an admitted request at most twice.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use http::StatusCode;
use support::recording::read_head;
use support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// An upstream that answers `/slow` after 200 ms and keeps the connection, and runs `/report`
/// (counted) but closes the connection instead of answering.
struct DroppingUpstream {
    url: String,
    reports: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl DroppingUpstream {
    async fn start() -> DroppingUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let reports = Arc::new(AtomicUsize::new(0));
        let counting = reports.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, counting.clone()));
            }
        });
        DroppingUpstream { url, reports, task }
    }
}

impl Drop for DroppingUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, reports: Arc<AtomicUsize>) {
    let mut buffer = Vec::new();
    loop {
        let Some(head_end) = read_head(&mut stream, &mut buffer).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
        buffer.drain(..head_end);
        if head.starts_with("GET /report ") {
            reports.fetch_add(1, Ordering::SeqCst);
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_request_the_upstream_drops_is_run_at_most_twice_however_many_connections_are_idle() {
    let upstream = DroppingUpstream::start().await;
    let routes = one_route_config(std::slice::from_ref(&upstream.url), "");
    // One worker: idle connections are pooled per worker.
    let gateway = TestGateway::start(&format!("workers = 1\n{routes}")).await;
    // Six requests at once leave six idle connections in the pool.
    let slow = gateway.url("/slow");
    let answers = join_all((0..6).map(|_| get(&slow))).await;
    assert!(
        answers
            .iter()
            .all(|(response, _)| response.status() == StatusCode::OK)
    );

    let (response, _) = get(&gateway.url("/report")).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    // Once on an idle connection, once more on a new one; not once per idle connection.
    assert_eq!(upstream.reports.load(Ordering::SeqCst), 2);
}
