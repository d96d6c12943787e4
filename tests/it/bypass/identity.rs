//! No identity the limiter did not count reaches the upstream (issue 49, items 2 and 3): a
//! client's fields naming another client address, or another method or path, are removed in
//! any spelling and however often given; the gateway writes X-Real-IP and Forwarded only when
//! configured, with the address it counted; an empty quoted cookie is no key. Raw bytes
//! through the own HTTP/1.1 server, hyper's and h2c, against a recording upstream.

use crate::support;

use support::recording::*;
use support::*;

/// Every field the default `[client_ip] remove_fields` lists, in odd spellings, some twice,
/// with the overrides that are always removed.
const CLAIMS: &[(&str, &str)] = &[
    ("Forwarded", "for=198.51.100.1"),
    ("forwarded", "for=\"[2001:db8::66]\""),
    ("X-Real-IP", "198.51.100.1"),
    ("x-real-ip", "198.51.100.2"),
    ("X-Forwarded", "for=198.51.100.1"),
    ("Forwarded-For", "198.51.100.1"),
    ("X-Original-Forwarded-For", "198.51.100.1"),
    ("tRuE-cLiEnT-iP", "198.51.100.1"),
    ("True-Client-IP", "198.51.100.2"),
    ("CF-CONNECTING-IP", "198.51.100.1"),
    ("Cf-Connecting-Ipv6", "2001:db8::66"),
    ("Fastly-Client-IP", "198.51.100.1"),
    ("x-client-ip", "198.51.100.1"),
    ("X-Cluster-Client-IP", "198.51.100.1"),
    ("Client-IP", "198.51.100.1"),
    ("X-Originating-IP", "198.51.100.1"),
    ("X-Remote-IP", "198.51.100.1"),
    ("X-Remote-Addr", "198.51.100.1"),
    ("X-ProxyUser-Ip", "198.51.100.1"),
    ("X-Envoy-External-Address", "198.51.100.1"),
    ("X-Azure-ClientIP", "198.51.100.1"),
    ("X-Azure-SocketIP", "198.51.100.1"),
    ("X-AppEngine-User-IP", "198.51.100.1"),
    ("X-Original-Method", "DELETE"),
    ("X-Forwarded-Path", "/admin"),
    ("X-Envoy-Original-Path", "/admin"),
    ("X-Original-URI", "/admin"),
    ("X-Forwarded-URI", "/admin"),
    ("X-Original-URL", "/admin"),
    ("X-Rewrite-URL", "/admin"),
];

/// `CLAIMS` with a Host, the client's own X-Forwarded-For and a field that stays.
fn claiming(xff: &str) -> Vec<(&str, &str)> {
    let mut fields = vec![("Host", "api.test"), ("X-Forwarded-For", xff)];
    fields.extend_from_slice(CLAIMS);
    fields.push(("X-Kept", "1"));
    fields
}

/// A gateway limiting every client IP to one request a minute; `client_ip` is the body of its
/// `[client_ip]` section.
async fn gateway(upstream: &TestUpstream, client_ip: &str) -> TestGateway {
    let config = format!(
        "[client_ip]\n{client_ip}\n[[limits]]\nname = \"per-ip\"\nkey = [\"ip\"]\n\
         rates = [{{ limit = 1, per = \"1m\" }}]\n{}limits = [\"per-ip\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    TestGateway::start(&config).await
}

/// Sends `fields` the way `via` says, expecting a 200; what the upstream got.
async fn received_via(
    gateway: &TestGateway,
    received: &mut tokio::sync::mpsc::UnboundedReceiver<Recorded>,
    via: Via,
    fields: &[(&str, &str)],
) -> Recorded {
    assert_eq!(
        get_via(gateway.addr, via, "/", fields).await,
        200,
        "{via:?}"
    );
    let mut seen = drain(received);
    assert_eq!(seen.len(), 1, "{via:?}");
    seen.remove(0)
}

/// Asserts that none of `CLAIMS` but the `kept` names reached the upstream.
fn none_but(recorded: &Recorded, kept: &[&str], via: Via) {
    for (name, _) in CLAIMS {
        let name = name.to_ascii_lowercase();
        if !kept.contains(&name.as_str()) {
            assert!(
                recorded.all(&name).is_empty(),
                "{via:?}: {name} in {recorded:?}"
            );
        }
    }
    assert_eq!(recorded.all("x-kept"), ["1"], "{via:?}");
}

#[tokio::test]
async fn no_claim_of_another_client_reaches_the_upstream_by_default() {
    let (upstream, mut received) = recording_upstream().await;
    for via in EVERY_WAY {
        // A gateway of its own for each way: each is limited once.
        let gateway = gateway(&upstream, "").await;
        let recorded = received_via(&gateway, &mut received, via, &claiming("203.0.113.9")).await;
        none_but(&recorded, &[], via);
        // The gateway's own field, alone: the peer, as the limiter counted it.
        assert_eq!(recorded.all("x-forwarded-for"), ["127.0.0.1"], "{via:?}");
        // Counted as the peer: other claims make no fresh identity.
        let again = get_via(gateway.addr, via, "/", &claiming("203.0.113.10")).await;
        assert_eq!(again, 429, "{via:?}");
        assert!(drain(&mut received).is_empty(), "{via:?}");
    }
}

#[tokio::test]
async fn the_gateway_writes_x_real_ip_and_forwarded_with_the_address_it_counted() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = gateway(
        &upstream,
        "trusted_proxies = [\"127.0.0.1\"]\nset_x_real_ip = true\nset_forwarded = true",
    )
    .await;
    let clients = [
        (Via::Own, "203.0.113.1", "for=203.0.113.1"),
        (Via::Hyper, "2001:db8::7", "for=\"[2001:db8::7]\""),
        (Via::H2, "203.0.113.3", "for=203.0.113.3"),
    ];
    for (via, client, forwarded) in clients {
        let recorded = received_via(&gateway, &mut received, via, &claiming(client)).await;
        none_but(&recorded, &["x-real-ip", "forwarded"], via);
        assert_eq!(recorded.all("x-real-ip"), [client], "{via:?}");
        assert_eq!(recorded.all("forwarded"), [forwarded], "{via:?}");
        let chain = format!("{client}, 127.0.0.1");
        assert_eq!(recorded.all("x-forwarded-for"), [chain.as_str()], "{via:?}");
        // That address is the one counted: spent, whatever else the request claims.
        let again = get_via(gateway.addr, via, "/", &claiming(client)).await;
        assert_eq!(again, 429, "{via:?}");
    }
    assert!(drain(&mut received).is_empty());
}

#[tokio::test]
async fn a_trusted_proxys_configured_field_goes_on_and_no_other() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = gateway(
        &upstream,
        "trusted_proxies = [\"127.0.0.1\"]\nheader = \"forwarded\"",
    )
    .await;
    for (via, client) in [(Via::Own, "192.0.2.1"), (Via::H2, "192.0.2.2")] {
        let proxy_says = format!("for={client}");
        let mut fields = vec![
            ("Host", "api.test"),
            ("Forwarded", proxy_says.as_str()),
            ("X-Real-IP", "198.51.100.1"),
            ("True-Client-IP", "198.51.100.1"),
            ("X-Kept", "1"),
        ];
        let recorded = received_via(&gateway, &mut received, via, &fields).await;
        assert_eq!(recorded.all("forwarded"), [proxy_says.as_str()], "{via:?}");
        none_but(&recorded, &["forwarded"], via);
        // Counted as the proxy said.
        fields[2].1 = "198.51.100.2";
        assert_eq!(
            get_via(gateway.addr, via, "/", &fields).await,
            429,
            "{via:?}"
        );
    }
}

#[tokio::test]
async fn a_list_of_ones_own_replaces_the_default() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = gateway(
        &upstream,
        "remove_fields = [\"X-My-Client\"]\nset_forwarded = true",
    )
    .await;
    let fields = [
        ("Host", "api.test"),
        ("x-MY-client", "198.51.100.1"),
        ("X-My-Client", "198.51.100.2"),
        ("True-Client-IP", "198.51.100.3"),
        ("Forwarded", "for=198.51.100.4"),
    ];
    let recorded = received_via(&gateway, &mut received, Via::Own, &fields).await;
    assert!(recorded.all("x-my-client").is_empty(), "{recorded:?}");
    assert_eq!(recorded.all("true-client-ip"), ["198.51.100.3"]);
    // Written by the gateway: the client's is replaced, by the peer it counted.
    assert_eq!(recorded.all("forwarded"), ["for=127.0.0.1"]);
}

#[tokio::test]
async fn an_empty_quoted_cookie_is_no_key() {
    let (upstream, mut received) = recording_upstream().await;
    let config = format!(
        "[[limits]]\nname = \"per-session\"\nkey = [\"cookie:session\"]\nmissing = \"deny\"\n\
         rates = [{{ limit = 2, per = \"1m\" }}]\n{}limits = [\"per-session\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    for via in EVERY_WAY {
        for cookie in ["session=\"\"", "a=1; session=\"\"", "session=\"\"; b=2"] {
            let fields = [("Host", "api.test"), ("Cookie", cookie)];
            let status = get_via(gateway.addr, via, "/", &fields).await;
            assert_eq!(status, 401, "{via:?} {cookie}");
        }
    }
    assert!(drain(&mut received).is_empty());
    // A quoted value is still the value: "x" and x are one key.
    let mut statuses = Vec::new();
    for cookie in ["session=\"x\"", "session=x", "session=\"x\""] {
        let fields = [("Host", "api.test"), ("Cookie", cookie)];
        statuses.push(get_via(gateway.addr, Via::Own, "/", &fields).await);
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(drain(&mut received).len(), 2);
}
