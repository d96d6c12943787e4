//! The real binary with stderr where log lines cannot go: a full disk (`/dev/full`), a pipe
//! whose reader stalls, a pipe whose reader went away. It keeps answering on the data and the
//! admin listeners, counts what it dropped (`rlp_log_lines_dropped_total{reason}`), and exits
//! cleanly on SIGTERM, never with a panic about printing.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use support::redis_server::free_port;
use support::*;

struct Gateway {
    child: Child,
    data: String,
    admin: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary serving in front of `upstream` with access lines on, its stderr `stderr`.
async fn start(name: &str, upstream: &TestUpstream, stderr: Stdio) -> Gateway {
    let (data, admin) = (free_port(), free_port());
    let config = format!(
        "[server]\nlisten = [\"127.0.0.1:{data}\"]\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [log]\naccess = true\n\n\
         [[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\n",
        upstream.url()
    );
    let path = support::binary::config_file(name, &config);
    let child = Command::new(env!("CARGO_BIN_EXE_ratelimit-proxy"))
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let gateway = Gateway {
        child,
        data: format!("http://127.0.0.1:{data}"),
        admin: format!("http://127.0.0.1:{admin}"),
    };
    let url = format!("{}/readyz", gateway.admin);
    let ready = eventually_async(Duration::from_secs(10), async || {
        let request = Request::get(&url).body(empty()).unwrap();
        matches!(
            tokio::time::timeout(Duration::from_secs(1), client().request(request)).await,
            Ok(Ok(response)) if response.status() == StatusCode::OK
        )
    })
    .await;
    assert!(ready, "the gateway never became ready");
    gateway
}

/// `count` GETs of `path` on one client; every one must be answered 200 within 5 s.
async fn answered(gateway: &Gateway, path: &str, count: usize) {
    let client = client();
    for i in 0..count {
        let request = Request::get(format!("{}{path}", gateway.data))
            .body(empty())
            .unwrap();
        let response = tokio::time::timeout(Duration::from_secs(5), client.request(request))
            .await
            .unwrap_or_else(|_| panic!("request {i} was not answered within 5 s"))
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
        response.into_body().collect().await.unwrap();
    }
}

async fn dropped(gateway: &Gateway, reason: &str) -> u64 {
    let (response, body) = get(&format!("{}/metrics", gateway.admin)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = String::from_utf8(body.to_vec()).unwrap();
    let series = format!("rlp_log_lines_dropped_total{{reason=\"{reason}\"}} ");
    let line = text.lines().find(|l| l.starts_with(&series));
    let line = line.unwrap_or_else(|| panic!("no {series}in\n{text}"));
    line[series.len()..].trim().parse().unwrap()
}

/// SIGTERM, then the exit status within 10 s: the last lines' flush must not hang on a log
/// reader that stopped reading.
fn terminated(mut gateway: Gateway) -> std::process::ExitStatus {
    let pid = gateway.child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let mut exit = None;
    eventually_blocking(Duration::from_secs(10), || {
        exit = gateway.child.try_wait().unwrap();
        exit.is_some()
    });
    exit.expect("no exit 10 s after SIGTERM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_on_a_full_disk_drops_and_counts_lines_and_serving_goes_on() {
    let upstream = TestUpstream::ok("ok").await;
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let gateway = start("log-full", &upstream, full.into()).await;
    answered(&gateway, "/", 200).await;
    assert!(dropped(&gateway, "write_failed").await >= 200);
    let status = terminated(gateway);
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_reader_that_stalls_costs_lines_not_answers() {
    let upstream = TestUpstream::ok("ok").await;
    let (reader, writer) = std::io::pipe().unwrap();
    let gateway = start("log-stalled", &upstream, writer.into()).await;
    // Access lines of ~6 KiB: 1,000 of them are more than the pipe (64 KiB) and the queue
    // (4 MiB) hold together, with nobody reading.
    let path = format!("/{}", "a".repeat(6000));
    answered(&gateway, &path, 1000).await;
    assert!(dropped(&gateway, "queue_full").await > 0);
    answered(&gateway, "/", 10).await;

    // The reader goes away: writes fail (EPIPE, not SIGPIPE) and serving goes on.
    drop(reader);
    answered(&gateway, "/", 200).await;
    let failed = dropped(&gateway, "write_failed").await;
    assert!(failed > 0, "{failed}");
    let status = terminated(gateway);
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_catches_up_gets_every_line_and_one_notice_of_the_drops() {
    use std::io::Read;
    let upstream = TestUpstream::ok("ok").await;
    let (mut reader, writer) = std::io::pipe().unwrap();
    let gateway = start("log-catch-up", &upstream, writer.into()).await;
    let path = format!("/{}", "b".repeat(6000));
    answered(&gateway, &path, 1000).await;
    let lost = dropped(&gateway, "queue_full").await;
    assert!(lost > 0);
    let collected = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = reader.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    answered(&gateway, "/after", 1).await;
    let status = terminated(gateway);
    assert!(status.success(), "{status:?}");
    let text = collected.join().unwrap();
    let notices: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("log lines dropped"))
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("see rlp_log_lines_dropped_total"),
        "{}",
        notices[0]
    );
    assert!(text.contains("/after"), "the line after the stall was lost");
    assert!(text.contains("exited"), "the last line was lost");
    let access = text.lines().filter(|l| l.contains("/bbbb")).count() as u64;
    assert!(
        access + lost >= 1000,
        "{access} written + {lost} dropped of 1000"
    );
}
