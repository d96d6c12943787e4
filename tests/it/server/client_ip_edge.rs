//! Real client IP, IP lists and the edge layer, end to end. Connections from 127.0.0.2 play
//! the trusted load balancer; connections from 127.0.0.1 are the open internet.

use crate::support;

use std::net::IpAddr;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use support::*;
use tokio::sync::Mutex;

const LOAD_BALANCER: &str = "127.0.0.2";

/// Upstream that records the X-Forwarded-For it was sent.
async fn recording_upstream() -> (TestUpstream, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let upstream = TestUpstream::start(move |request| {
        let record = record.clone();
        async move {
            let xff = request
                .headers()
                .get("x-forwarded-for")
                .map(|v| v.to_str().unwrap().to_string());
            record.lock().await.push(xff.unwrap_or_default());
            Response::new(full("ok"))
        }
    })
    .await;
    (upstream, seen)
}

/// A gateway with an edge burst of 3 per client per hour (so nothing refills during a test).
async fn gateway(upstream: &TestUpstream, client_ip_section: &str, extra: &str) -> TestGateway {
    let config = format!(
        r#"
{client_ip_section}

[ip_lists]
partners = ["198.51.100.0/24", "2001:db8:100::/48"]
office_nat = ["203.0.113.0/24"]
blocked = ["192.0.2.66/32"]

[edge]
rate = "1/h"
burst = 3
deny = ["blocked"]
overrides = [
  {{ list = "partners", exempt = true }},
  {{ list = "office_nat", rate = "1/h", burst = 10 }},
]
{extra}
{}"#,
        one_route_config(&[upstream.url()], "")
    );
    TestGateway::start(&config).await
}

const TRUST_LB: &str = "[client_ip]\ntrusted_proxies = [\"127.0.0.2/32\", \"10.0.0.0/8\"]";

/// Sends GET / from `source` with the given forwarding header; returns the status.
async fn status_from(
    gateway: &TestGateway,
    source: &str,
    header: Option<(&str, &str)>,
) -> StatusCode {
    let mut request = Request::get(gateway.url("/"));
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    let response = client_from(source.parse::<IpAddr>().unwrap())
        .request(request.body(empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    response.into_body().collect().await.unwrap();
    status
}

/// How many requests in a row pass before the first 429 (up to `tries`).
async fn allowed_in_a_row(
    gateway: &TestGateway,
    source: &str,
    header: Option<(&str, &str)>,
    tries: usize,
) -> usize {
    for i in 0..tries {
        if status_from(gateway, source, header).await != StatusCode::OK {
            return i;
        }
    }
    tries
}

#[tokio::test]
async fn a_spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let (upstream, seen) = recording_upstream().await;
    let gateway = gateway(&upstream, TRUST_LB, "").await;
    for i in 0..3 {
        let spoof = format!("198.18.0.{i}");
        assert_eq!(
            status_from(&gateway, "127.0.0.1", Some(("x-forwarded-for", &spoof))).await,
            StatusCode::OK
        );
    }
    // A fourth made-up address does not buy a fresh bucket: the peer is the client.
    assert_eq!(
        status_from(
            &gateway,
            "127.0.0.1",
            Some(("x-forwarded-for", "198.18.0.99"))
        )
        .await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert!(
        seen.lock().await.iter().all(|xff| xff == "127.0.0.1"),
        "{:?}",
        seen.lock().await
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_gets_its_own_bucket() {
    let (upstream, seen) = recording_upstream().await;
    let gateway = gateway(&upstream, TRUST_LB, "").await;
    let alice = Some(("x-forwarded-for", "198.18.0.1"));
    let bob = Some(("x-forwarded-for", "198.18.0.2"));
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, alice, 10).await,
        3
    );
    assert_eq!(allowed_in_a_row(&gateway, LOAD_BALANCER, bob, 10).await, 3);
    assert_eq!(seen.lock().await[0], "198.18.0.1, 127.0.0.2");
}

#[tokio::test]
async fn a_chain_of_trusted_hops_and_garbage_entries() {
    let (upstream, _) = recording_upstream().await;
    let gateway = gateway(&upstream, TRUST_LB, "").await;
    // The client wrote 6.6.6.6 itself; 198.18.0.7 reached our proxies 10.1.1.1 and 10.2.2.2.
    let chain = Some(("x-forwarded-for", "6.6.6.6, 198.18.0.7, 10.1.1.1, 10.2.2.2"));
    assert_eq!(allowed_in_a_row(&gateway, LOAD_BALANCER, chain, 2).await, 2);
    // Same client, written plainly: one token left, then limited.
    let plain = Some(("x-forwarded-for", "198.18.0.7:4711"));
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, plain, 10).await,
        1
    );
    // 6.6.6.6 was never charged.
    assert_eq!(
        allowed_in_a_row(
            &gateway,
            LOAD_BALANCER,
            Some(("x-forwarded-for", "6.6.6.6")),
            10
        )
        .await,
        3
    );
    // Garbage right of the client stops the walk at the last good hop (the balancer itself).
    let garbage = Some(("x-forwarded-for", "198.18.0.8, not-an-address"));
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, garbage, 10).await,
        3
    );
    assert_eq!(
        status_from(
            &gateway,
            LOAD_BALANCER,
            Some(("x-forwarded-for", "198.18.0.8"))
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        status_from(&gateway, LOAD_BALANCER, None).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn forwarded_header_with_quoted_ipv6_and_port() {
    let (upstream, _) = recording_upstream().await;
    let section = format!("{TRUST_LB}\nheader = \"forwarded\"");
    let gateway = gateway(&upstream, &section, "").await;
    let quoted = Some((
        "forwarded",
        r#"for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.1"#,
    ));
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, quoted, 10).await,
        3
    );
    // Another address in the same /64 shares the bucket.
    let same_net = Some(("forwarded", r#"for="[2001:db8:cafe::99]""#));
    assert_eq!(
        status_from(&gateway, LOAD_BALANCER, same_net).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn ipv6_clients_share_a_bucket_per_64_and_not_across() {
    let (upstream, _) = recording_upstream().await;
    let gateway = gateway(&upstream, TRUST_LB, "").await;
    let first = Some(("x-forwarded-for", "2001:db8:1:1::1"));
    let same_64 = Some(("x-forwarded-for", "2001:db8:1:1:ffff::2"));
    let other_64 = Some(("x-forwarded-for", "2001:db8:1:2::1"));
    assert_eq!(allowed_in_a_row(&gateway, LOAD_BALANCER, first, 2).await, 2);
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, same_64, 10).await,
        1
    );
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, other_64, 10).await,
        3
    );
}

#[tokio::test]
async fn partners_pass_unlimited_office_nat_has_its_own_rate_and_the_deny_list_gets_403() {
    let (upstream, _) = recording_upstream().await;
    let gateway = gateway(&upstream, TRUST_LB, "").await;
    let partner = Some(("x-forwarded-for", "198.51.100.20"));
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, partner, 50).await,
        50
    );
    let partner_v6 = Some(("x-forwarded-for", "2001:db8:100:5::1"));
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, partner_v6, 20).await,
        20
    );
    let office = Some(("x-forwarded-for", "203.0.113.10"));
    assert_eq!(
        allowed_in_a_row(&gateway, LOAD_BALANCER, office, 50).await,
        10
    );

    let request = Request::get(gateway.url("/"))
        .header("x-forwarded-for", "192.0.2.66")
        .body(empty())
        .unwrap();
    let response = client_from(LOAD_BALANCER.parse().unwrap())
        .request(request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    problem(&Response::from_parts(parts, ()), &body);
}

#[tokio::test]
async fn the_edge_429_carries_retry_after_rate_headers_and_a_problem_naming_the_edge() {
    let (upstream, _) = recording_upstream().await;
    let gateway = gateway(&upstream, "", "").await;
    for _ in 0..3 {
        assert_eq!(get(&gateway.url("/")).await.0.status(), StatusCode::OK);
    }
    let (response, body) = get(&gateway.url("/")).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let h = response.headers();
    let retry_after: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    // One token per hour: the wait is just under an hour, rounded up.
    assert!((3500..=3600).contains(&retry_after), "{retry_after}");
    assert_eq!(h["x-ratelimit-limit"], "1");
    assert_eq!(h["x-ratelimit-remaining"], "0");
    assert_eq!(h["ratelimit-policy"], "\"edge\";q=1;w=3600");
    assert!(
        h["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with("\"edge\";r=0;t=")
    );
    let answer = problem(&response, &body);
    assert_eq!(answer["status"], 429);
    assert!(
        answer["detail"].as_str().unwrap().contains("\"edge\""),
        "{answer}"
    );
    assert_eq!(upstream.hits(), 3);
}

#[tokio::test]
async fn ip_lists_load_from_files_next_to_the_config() {
    let upstream = TestUpstream::ok("ok").await;
    let text = format!(
        "[ip_lists]\npartners = {{ file = \"partners.txt\" }}\n[edge]\nrate = \"1/h\"\nburst = 1\noverrides = [{{ list = \"partners\", exempt = true }}]\n[client_ip]\ntrusted_proxies = [\"127.0.0.2\"]\n{}",
        one_route_config(&[upstream.url()], "")
    );
    let list = "# partners\n198.51.100.0/24  # main\n\n2001:db8:100::/48\n";
    let (gateway, path) =
        TestGateway::start_in_dir("lists", &[("partners.txt", list)], &text).await;
    let addr = gateway.addr;
    let partner = client_from(LOAD_BALANCER.parse().unwrap());
    for _ in 0..5 {
        let request = Request::get(format!("http://{addr}/"))
            .header("x-forwarded-for", "198.51.100.3")
            .body(empty())
            .unwrap();
        assert_eq!(
            partner.request(request).await.unwrap().status(),
            StatusCode::OK
        );
    }

    std::fs::write(
        path.with_file_name("partners.txt"),
        "198.51.100.0/24\nnot a cidr\n",
    )
    .unwrap();
    let error = ratelimit_proxy::testing::load(&path)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("ip_lists.partners.file: partners.txt line 2: expected a CIDR"),
        "{error}"
    );
}

/// A dual-stack listener on `[::]` reports an IPv4 client as `::ffff:127.0.0.1`: the limiter,
/// X-Forwarded-For, X-Real-IP and Forwarded all name it `127.0.0.1`, one form
/// (`IpAddr::to_canonical`).
#[tokio::test]
async fn an_ipv4_client_of_a_dual_stack_listener_is_named_in_its_ipv4_form_upstream() {
    let (upstream, mut received) = support::recording::recording_upstream().await;
    let config = format!(
        r#"
[client_ip]
set_x_real_ip = true
set_forwarded = true

[ip_lists]
local = ["127.0.0.1/32"]

[edge]
rate = "1/h"
burst = 1
overrides = [{{ list = "local", exempt = true }}]
{}"#,
        one_route_config(&[upstream.url()], "")
    );
    let Some(gateway) = TestGateway::start_on("[::]:0", &config).await else {
        eprintln!("skipped: this machine cannot listen on [::] (no IPv6)");
        return;
    };
    let v4 = std::net::SocketAddr::from(([127, 0, 0, 1], gateway.addr.port()));
    match tokio::net::TcpStream::connect(v4).await {
        Ok(probe) => assert_eq!(probe.local_addr().unwrap().ip(), v4.ip()),
        Err(error) => {
            eprintln!("skipped: [::] is not dual-stack on this machine ({error})");
            return;
        }
    }
    let head = b"GET /who HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n";
    // The edge exempts 127.0.0.1 only: a burst of one would refuse the second request if the
    // limiter counted another form of the address.
    for round in 0..3 {
        assert_eq!(
            support::recording::raw_status(v4, head).await,
            200,
            "{round}"
        );
    }
    let recorded = support::recording::drain(&mut received);
    assert_eq!(recorded.len(), 3);
    for request in &recorded {
        assert_eq!(request.all("x-forwarded-for"), ["127.0.0.1"], "{request:?}");
        assert_eq!(request.all("x-real-ip"), ["127.0.0.1"], "{request:?}");
        assert_eq!(request.all("forwarded"), ["for=127.0.0.1"], "{request:?}");
    }
}
