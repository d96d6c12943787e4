//! No way around a limit by spelling a path differently (issue 30): routes match the canonical
//! path (RFC 3986 §6.2.2, §5.2.4) and the upstream receives that path, through the own HTTP/1.1
//! server, hyper's HTTP/1.1 server and HTTP/2.

use crate::support;

use support::recording::*;
use support::*;

/// `/login` (POST, 1 a minute per IP; `case_sensitive` as given) and an unlimited catch-all;
/// `server` is added to `[server]`.
async fn login_gateway(upstream: &TestUpstream, case_sensitive: bool, server: &str) -> TestGateway {
    let config = format!(
        "{server}\n[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\
         [[limits]]\nname = \"login\"\nkey = [\"ip\"]\nrates = [{{ limit = 1, per = \"1m\" }}]\n\
         [[routes]]\nname = \"login\"\npath_prefix = \"/login\"\nmethods = [\"POST\"]\n\
         case_sensitive = {case_sensitive}\nupstream = \"api\"\nlimits = [\"login\"]\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\n",
        upstream.url()
    );
    TestGateway::start(&config).await
}

async fn post(addr: std::net::SocketAddr, via: Via, target: &str) -> u16 {
    let fields = [("Host", "api.test")];
    let raw = Raw {
        method: "POST",
        target,
        fields: &fields,
    };
    status_via(addr, via, &raw).await
}

#[tokio::test]
async fn every_spelling_of_a_spent_route_is_that_route() {
    let spellings = [
        "//login",
        "/./login",
        "/%6cogin",
        "/%6Cogin",
        "/x/../login",
        "/%2e%2e/login",
        "/login/x/..",
        "///login//",
        "/x/%2E%2E/login",
    ];
    for via in EVERY_WAY {
        let (upstream, mut received) = recording_upstream().await;
        let gateway = login_gateway(&upstream, true, "").await;
        assert_eq!(post(gateway.addr, via, "/login").await, 200, "{via:?}");
        for target in spellings {
            assert_eq!(
                post(gateway.addr, via, target).await,
                429,
                "{via:?} {target}"
            );
        }
        // The unlimited route still serves what is not /login, in canonical form.
        assert_eq!(post(gateway.addr, via, "/v1//a/./b/%7eu?q=%2e").await, 200);
        let targets: Vec<String> = drain(&mut received).into_iter().map(|r| r.target).collect();
        assert_eq!(targets, ["/login", "/v1/a/b/~u?q=%2e"], "{via:?}");
    }
}

#[tokio::test]
async fn a_case_insensitive_route_matches_and_counts_every_case() {
    for via in EVERY_WAY {
        let (upstream, mut received) = recording_upstream().await;
        let gateway = login_gateway(&upstream, false, "").await;
        assert_eq!(post(gateway.addr, via, "/LOGIN").await, 200, "{via:?}");
        for target in ["/login", "/Login", "//LoGiN"] {
            assert_eq!(
                post(gateway.addr, via, target).await,
                429,
                "{via:?} {target}"
            );
        }
        let targets: Vec<String> = drain(&mut received).into_iter().map(|r| r.target).collect();
        assert_eq!(targets, ["/LOGIN"], "{via:?}");
    }
    // Case-sensitive (the default), `/LOGIN` is another path: the catch-all's.
    let (upstream, _received) = recording_upstream().await;
    let gateway = login_gateway(&upstream, true, "").await;
    assert_eq!(post(gateway.addr, Via::Own, "/login").await, 200);
    assert_eq!(post(gateway.addr, Via::Own, "/LOGIN").await, 200);
}

#[tokio::test]
async fn a_path_key_on_a_case_insensitive_route_counts_one_path_in_any_case() {
    let (upstream, _received) = recording_upstream().await;
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\
         [[limits]]\nname = \"per-path\"\nkey = [\"path\"]\nrates = [{{ limit = 1, per = \"1m\" }}]\n\
         [[routes]]\nname = \"files\"\npath_prefix = \"/files/\"\ncase_sensitive = false\nupstream = \"api\"\nlimits = [\"per-path\"]\n",
        upstream.url()
    );
    let gateway = TestGateway::start(&config).await;
    assert_eq!(post(gateway.addr, Via::Own, "/files/Report").await, 200);
    assert_eq!(post(gateway.addr, Via::Own, "/FILES/report").await, 429);
    assert_eq!(post(gateway.addr, Via::Own, "/files/other").await, 200);
}

#[tokio::test]
async fn paths_without_a_canonical_form_are_refused() {
    let (upstream, mut received) = recording_upstream().await;
    let gateway = login_gateway(&upstream, true, "").await;
    for via in EVERY_WAY {
        for target in [
            "/a%zz",
            "/a%4",
            "/a%00b",
            "/a\\b",
            "/x/..;/login",
            "/x/.;y/login",
        ] {
            let status = post(gateway.addr, via, target).await;
            assert!(refused(via, status), "{via:?} {target}: {status}");
        }
    }
    assert!(drain(&mut received).is_empty());
}

#[tokio::test]
async fn escaped_slashes_are_kept_encoded_or_refused() {
    let (upstream, mut received) = recording_upstream().await;
    let keeping = login_gateway(&upstream, true, "").await;
    assert_eq!(post(keeping.addr, Via::Own, "/a%2fb/%5c").await, 200);
    let targets: Vec<String> = drain(&mut received).into_iter().map(|r| r.target).collect();
    assert_eq!(targets, ["/a%2Fb/%5C"]);
    let rejecting = login_gateway(&upstream, true, "escaped_slashes = \"reject\"").await;
    for via in EVERY_WAY {
        for target in ["/a%2Fb", "/login%2f", "/a%5Cb"] {
            let status = post(rejecting.addr, via, target).await;
            assert!(refused(via, status), "{via:?} {target}: {status}");
        }
    }
    assert!(drain(&mut received).is_empty());
}

#[tokio::test]
async fn segment_parameters_are_not_a_way_around_a_route() {
    for via in EVERY_WAY {
        let (upstream, mut received) = recording_upstream().await;
        let gateway = login_gateway(&upstream, true, "").await;
        assert_eq!(post(gateway.addr, via, "/login").await, 200, "{via:?}");
        for target in [
            "/;x/login",
            "/;/login",
            "/login;jsessionid=1",
            "/x;a/../login",
        ] {
            assert_eq!(
                post(gateway.addr, via, target).await,
                429,
                "{via:?} {target}"
            );
        }
        let targets: Vec<String> = drain(&mut received).into_iter().map(|r| r.target).collect();
        assert_eq!(targets, ["/login"], "{via:?}");
    }
}

#[tokio::test]
async fn head_counts_with_get_on_a_get_route() {
    let (upstream, mut received) = recording_upstream().await;
    let config = format!(
        "[[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\
         [[limits]]\nname = \"reads\"\nkey = [\"ip\"]\nrates = [{{ limit = 1, per = \"1m\" }}]\n\
         [[routes]]\nname = \"reads\"\npath_prefix = \"/reads\"\nmethods = [\"GET\"]\nupstream = \"api\"\nlimits = [\"reads\"]\n\
         [[routes]]\nname = \"default\"\nupstream = \"api\"\n",
        upstream.url()
    );
    let gateway = TestGateway::start(&config).await;
    let fields = [("Host", "api.test")];
    let get = Raw {
        method: "GET",
        target: "/reads",
        fields: &fields,
    };
    assert_eq!(status_via(gateway.addr, Via::Own, &get).await, 200);
    for via in EVERY_WAY {
        let head = Raw {
            method: "HEAD",
            ..get
        };
        assert_eq!(status_via(gateway.addr, via, &head).await, 429, "{via:?}");
    }
    assert_eq!(drain(&mut received).len(), 1);
}
