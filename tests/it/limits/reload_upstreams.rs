//! Reloads and upstream health end to end: what the gateway learned of a server (down by its
//! health checks, ejected after a refused connection) survives a reload that leaves the server's
//! definition alone, a changed definition starts afresh, and reloads neither multiply nor
//! starve the health checks.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Request;
use support::*;

/// A config of one upstream over `servers`, with an admin listener; `marker` changes a setting
/// the upstream does not depend on, so that every reload has something to apply.
fn config(servers: &[String], upstream_extra: &str, marker: usize) -> String {
    format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[response]\nproblem_type = \"https://example.com/{marker}\"\n{}",
        one_route_config(servers, upstream_extra)
    )
}

fn rewrite(path: &Path, text: &str) {
    std::fs::write(
        path,
        format!("[server]\nlisten = [\"127.0.0.1:0\"]\n{text}"),
    )
    .unwrap();
}

/// The statuses of `count` POSTs, one after another. A POST has a body, so one sent to a server
/// that refuses it is not tried on another: it is a 502.
async fn post_statuses(gateway: &TestGateway, count: usize) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(count);
    for _ in 0..count {
        let request = Request::post(gateway.url("/x")).body(full("payload"));
        statuses.push(send(request.unwrap()).await.0.status().as_u16());
    }
    statuses
}

/// Whether the admin listener reports `server` of upstream `api` as available.
async fn available(gateway: &TestGateway, server: &str) -> bool {
    let series = format!("rlp_upstream_healthy{{upstream=\"api\",server=\"{server}\"}}");
    metric(gateway, &series).await == 1.0
}

/// Polls the admin listener until `server`'s availability is `wanted`, for at most 10 s.
async fn becomes_available(gateway: &TestGateway, server: &str, wanted: bool) -> bool {
    eventually_async(Duration::from_secs(10), async || {
        available(gateway, server).await == wanted
    })
    .await
}

#[tokio::test]
async fn reloads_keep_an_ejected_server_out_of_rotation_until_its_definition_changes() {
    let up = TestUpstream::ok("up").await;
    // First, so that a pool that knows nothing of it sends it the first request.
    let dead = format!("http://{}", refused_addr().await);
    let servers = [dead.clone(), up.url()];
    let ejected = "ejection_time = \"60s\"";
    let (gateway, path) =
        TestGateway::start_in_dir("reload-ejected", &[], &config(&servers, ejected, 0)).await;
    assert_eq!(post_statuses(&gateway, 1).await, [502], "the ejection");

    let mut statuses = Vec::new();
    for round in 1..=5 {
        rewrite(&path, &config(&servers, ejected, round));
        gateway.reloader.reload().unwrap();
        statuses.extend(post_statuses(&gateway, 10).await);
    }
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert!(!available(&gateway, &dead).await);

    // A new ejection_time is a new definition: what was learned under the old one is dropped.
    rewrite(&path, &config(&servers, "ejection_time = \"59s\"", 6));
    gateway.reloader.reload().unwrap();
    assert!(available(&gateway, &dead).await);
    assert_eq!(post_statuses(&gateway, 2).await, [502, 200]);
}

#[tokio::test]
async fn reloads_keep_a_server_that_fails_its_checks_out_until_its_checks_change() {
    let up = TestUpstream::ok("up").await;
    let dead = format!("http://{}", refused_addr().await);
    let servers = [dead.clone(), up.url()];
    // Ejections end at once here: only the checks keep the dead server out.
    let checked = |interval: &str| {
        format!(
            "ejection_time = \"1ms\"\nhealth_check = {{ path = \"/\", interval = \"{interval}\", unhealthy_threshold = 2 }}"
        )
    };
    let text = config(&servers, &checked("300ms"), 0);
    let (gateway, path) = TestGateway::start_in_dir("reload-checked", &[], &text).await;
    assert!(becomes_available(&gateway, &dead, false).await);

    let mut statuses = Vec::new();
    for round in 1..=5 {
        rewrite(&path, &config(&servers, &checked("300ms"), round));
        gateway.reloader.reload().unwrap();
        statuses.extend(post_statuses(&gateway, 10).await);
    }
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");

    // New checks start from nothing: the server is trusted until they fail twice again.
    rewrite(&path, &config(&servers, &checked("250ms"), 6));
    gateway.reloader.reload().unwrap();
    assert!(available(&gateway, &dead).await);
    assert!(becomes_available(&gateway, &dead, false).await);
}

#[tokio::test]
async fn reloads_neither_multiply_nor_starve_health_checks() {
    let checks = Arc::new(AtomicUsize::new(0));
    let counted = checks.clone();
    let up = TestUpstream::start(move |request| {
        if request.uri().path() == "/healthz" {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        async { http::Response::new(full("up")) }
    })
    .await;
    let every = Duration::from_millis(300);
    let check = "health_check = { path = \"/healthz\", interval = \"300ms\" }";
    let servers = [up.url()];
    let (gateway, path) =
        TestGateway::start_in_dir("reload-checks", &[], &config(&servers, check, 0)).await;
    assert!(
        eventually(Duration::from_secs(10), || checks.load(Ordering::SeqCst)
            >= 1)
        .await
    );

    // Reloads every 20 ms, far faster than the checks come, until three checks came: their
    // schedule goes on through them (not starved), one round per interval (not multiplied).
    let (started, before) = (Instant::now(), checks.load(Ordering::SeqCst));
    let mut round = 0;
    let checked = eventually(Duration::from_secs(10), || {
        round += 1;
        rewrite(&path, &config(&servers, check, round));
        gateway.reloader.reload().unwrap();
        checks.load(Ordering::SeqCst) - before >= 3
    })
    .await;
    let (during, took) = (checks.load(Ordering::SeqCst) - before, started.elapsed());
    assert!(checked, "{during} checks in {took:?} of reloads");
    let most = (took.as_millis() / every.as_millis()) as usize + 2;
    assert!(
        during <= most,
        "{during} checks in {took:?}, {round} reloads"
    );

    // The checkers of the replaced runtimes have all stopped: one round per interval remains,
    // so five more checks take at least three intervals.
    let (started, before) = (Instant::now(), checks.load(Ordering::SeqCst));
    let checked = eventually(Duration::from_secs(10), || {
        checks.load(Ordering::SeqCst) - before >= 5
    })
    .await;
    let (after, took) = (checks.load(Ordering::SeqCst) - before, started.elapsed());
    assert!(checked, "{after} checks in {took:?}");
    let most = (took.as_millis() / every.as_millis()) as usize + 2;
    assert!(after <= most, "{after} checks in {took:?}");
}
