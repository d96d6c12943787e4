//! The probe end to end against the real gateway and echo upstream on loopback, and its
//! arithmetic on known samples.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderName, HeaderValue, Response, StatusCode, Uri, header};

use crate::common::{TestGateway, TestUpstream, empty, one_route_config, refused_addr};

use crate::probe::{self, Endpoint, Plan, ProbeError, Sample, Samples};
use crate::report::{Quantiles, Report, paired_differences};

fn sample(tick: u64, micros: u64) -> Sample {
    Sample {
        tick,
        latency: Duration::from_micros(micros),
    }
}

#[test]
fn quantiles_take_the_nearest_rank() {
    let q = Quantiles::of((1..=200).rev().collect()).unwrap();
    assert_eq!((q.n, q.p50, q.p99), (200, 100, 198));
    let one = Quantiles::of(vec![7]).unwrap();
    assert_eq!((one.p50, one.p99), (7, 7));
    assert_eq!(Quantiles::of(Vec::new()), None);
}

#[test]
fn pairs_join_on_the_instant_and_keep_their_sign() {
    let samples = Samples {
        target: (0..20).map(|tick| sample(tick, 100 + tick)).collect(),
        // Tick 30 has no target request (a run cut short): it makes no pair.
        direct: vec![sample(0, 90), sample(10, 150), sample(30, 1)],
    };
    assert_eq!(paired_differences(&samples), vec![10_000, -40_000]);
}

#[test]
fn the_report_is_one_line_of_fields_the_scripts_read() {
    let samples = Samples {
        target: vec![sample(0, 1500), sample(1, 2500)],
        direct: vec![sample(0, 1000)],
    };
    let line = Report::from_samples(&samples).to_string();
    assert_eq!(
        line,
        "target_n=2 target_p50_ms=1.500 target_p99_ms=2.500 direct_n=1 direct_p50_ms=1.000 \
         direct_p99_ms=1.000 added_p99_ms=1.500 paired_added_n=1 paired_added_p50_ms=0.500 \
         paired_added_p99_ms=0.500"
    );
    let nothing = Samples {
        target: Vec::new(),
        direct: Vec::new(),
    };
    assert_eq!(
        Report::from_samples(&nothing).to_string(),
        "target_n=0 direct_n=0 paired_added_n=0"
    );
}

fn endpoint(url: &str) -> Endpoint {
    let key = (
        HeaderName::from_static("x-api-key"),
        HeaderValue::from_static("probe"),
    );
    Endpoint::new(&url.parse::<Uri>().unwrap(), &[key]).unwrap()
}

fn plan(target: &str, direct: &str, rate: u64, seconds: u64) -> Plan {
    Plan {
        target: endpoint(target),
        direct: endpoint(direct),
        rate,
        warmup_ticks: rate / 4,
        measured_ticks: rate * seconds,
        connections: 8,
        direct_every: 4,
        timeout: Duration::from_secs(10),
    }
}

/// The gateway in front of `upstream`, with `route` added to its one route.
async fn gateway(upstream: SocketAddr, route: &str) -> TestGateway {
    let routes = one_route_config(&[format!("http://{upstream}")], "");
    TestGateway::start(&format!(
        "[store]\nhash_secret = \"test\"\n{routes}{route}\n"
    ))
    .await
}

async fn echo() -> SocketAddr {
    ratelimit_proxy::testing::echo::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_run_measures_every_scheduled_request_of_both_sides() {
    let upstream = echo().await;
    let proxy = gateway(upstream, "").await;
    let plan = plan(
        &proxy.url("/bench?x=1"),
        &format!("http://{upstream}/bench?x=1"),
        400,
        1,
    );
    let started = tokio::time::Instant::now();
    let samples = probe::run(&plan).await.unwrap();
    // Nothing is sent before its instant: the last one falls at (ticks − 1) / rate.
    assert!(started.elapsed() >= Duration::from_millis(1247));

    let mut ticks: Vec<u64> = samples.target.iter().map(|s| s.tick).collect();
    ticks.sort_unstable();
    assert_eq!(ticks, (100..500).collect::<Vec<_>>());
    let mut direct: Vec<u64> = samples.direct.iter().map(|s| s.tick).collect();
    direct.sort_unstable();
    assert_eq!(direct, (100..500).step_by(4).collect::<Vec<_>>());
    assert_eq!(paired_differences(&samples).len(), 100);
    assert!(samples.target.iter().all(|s| s.latency > Duration::ZERO));
}

#[tokio::test]
async fn connections_the_server_closes_are_opened_again() {
    // Every third answer says `Connection: close`, as nginx's does at `keepalive_requests`,
    // and the server then closes that connection.
    let answered = Arc::new(AtomicUsize::new(0));
    let server = TestUpstream::start(move |_| {
        let n = answered.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            let mut response = Response::new(empty());
            if n.is_multiple_of(3) {
                let close = HeaderValue::from_static("close");
                response.headers_mut().insert(header::CONNECTION, close);
            }
            response
        }
    })
    .await;
    let samples = probe::run(&plan(&server.url(), &server.url(), 200, 1))
        .await
        .unwrap();
    assert_eq!(samples.target.len(), 200);
    assert_eq!(samples.direct.len(), 50);
}

#[tokio::test]
async fn an_answer_not_2xx_fails_the_run_naming_it() {
    let upstream = echo().await;
    let denying = "limits = [\"one\"]\n[[limits]]\nname = \"one\"\nkey = [\"header:x-api-key\"]\n\
                   rates = [{ limit = 1, per = \"1h\" }]";
    let proxy = gateway(upstream, denying).await;
    let plan = plan(&proxy.url("/"), &format!("http://{upstream}/"), 200, 1);
    match probe::run(&plan).await {
        Err(ProbeError::Status { url, status }) => {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(url.port_u16(), Some(proxy.addr.port()));
        }
        Err(other) => panic!("expected a status error, got {other}"),
        Ok(_) => panic!("a run of 429s passed"),
    }
}

#[tokio::test]
async fn a_side_that_does_not_listen_fails_before_the_clock_starts() {
    let upstream = echo().await;
    let port = refused_addr().await.port();
    let plan = plan(
        &format!("http://{upstream}/"),
        &format!("http://127.0.0.1:{port}/"),
        200,
        1,
    );
    let error = probe::run(&plan).await.err().expect("a run without DIRECT");
    assert!(matches!(error, ProbeError::Connect { .. }), "{error}");
    assert!(
        error
            .to_string()
            .starts_with(&format!("cannot connect to http://127.0.0.1:{port}/")),
        "{error}"
    );
}

#[tokio::test]
async fn a_peer_that_stops_answering_fails_the_run_in_time() {
    // Accepts connections and reads nothing: every request waits for its answer. Both sides
    // point at it, so the timeout cannot come from a slow echo on a busy machine.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let mut plan = plan(&url, &url, 200, 1);
    plan.timeout = Duration::from_millis(300);
    let started = tokio::time::Instant::now();
    let error = probe::run(&plan)
        .await
        .err()
        .expect("a run against a silent peer");
    assert!(matches!(error, ProbeError::Timeout { .. }), "{error}");
    assert_eq!(
        error.to_string(),
        format!("{url} did not answer within 300ms")
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    held.abort();
}

#[test]
fn urls_other_than_http_are_refused() {
    for url in ["https://127.0.0.1:1/", "/bench"] {
        let error = Endpoint::new(&url.parse::<Uri>().unwrap(), &[]).err();
        assert!(error.is_some_and(|e| e.contains("expected")), "{url}");
    }
}

#[test]
fn bad_arguments_are_named() {
    use clap::Parser;
    let args = |extra: &[&str]| {
        let mut all = vec!["paired_latency", "--rate", "100"];
        all.extend_from_slice(extra);
        all.extend_from_slice(&["http://127.0.0.1:1/", "http://127.0.0.1:2/"]);
        crate::Args::try_parse_from(all).unwrap().plan().err()
    };
    assert_eq!(args(&[]), None);
    assert_eq!(
        args(&["--seconds", "0"]).as_deref(),
        Some("--seconds is 0: expected 1 or more")
    );
    assert_eq!(
        args(&["--direct-every", "0"]).as_deref(),
        Some("--direct-every is 0: expected 1 or more")
    );
    assert_eq!(
        args(&["--timeout-seconds", "0"]).as_deref(),
        Some("--timeout-seconds is 0: expected 1 or more")
    );
    let header = crate::Args::try_parse_from([
        "paired_latency",
        "--rate",
        "1",
        "-H",
        "x-api-key",
        "http://a/",
        "http://b/",
    ]);
    let error = header.err().expect("a header without a colon").to_string();
    assert!(
        error.contains("header \"x-api-key\": expected \"name: value\""),
        "{error}"
    );
    assert_eq!(
        crate::parse_header(" x-api-key :  bench ").unwrap(),
        (
            HeaderName::from_static("x-api-key"),
            HeaderValue::from_static("bench")
        )
    );
}
