//! `[log]` end to end through the real binary: JSON lines, one access line per request with the
//! request id of its response, no API keys or Authorization values anywhere in the logs; the
//! access lines of refusals sampled or skipped (`denied`); no colours off a terminal; the
//! `started` and `exited` lines; and the `RUST_LOG` that keeps access lines alone.

use crate::support;

use std::time::Duration;

use http::{Request, StatusCode};
use support::binary::{RunningBinary, config_file, json};
use support::*;

/// The access lines among `lines`, parsed.
fn access_lines(lines: &[String]) -> Vec<serde_json::Value> {
    (lines.iter().filter_map(|l| json(l)))
        .filter(|j| j["target"] == "access")
        .collect()
}

#[tokio::test]
async fn access_lines_are_json_with_the_request_id_and_never_show_secrets() {
    let upstream = TestUpstream::ok("ok").await;
    let config = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\nformat = \"json\"\naccess = true\n[edge]\nrate = \"2/h\"\nburst = 2\n[[limits]]\nname = \"per-key\"\nkey = [\"header:x-api-key\"]\nrates = [{{ limit = 1, per = \"1h\" }}]\n{}",
        one_route_config(&[upstream.url()], "").replace(
            "upstream = \"api\"\n",
            "upstream = \"api\"\nlimits = [\"per-key\"]\n"
        )
    );
    let binary = RunningBinary::start(&config_file("access", &config), "info");
    let addr = binary.json_listen_addr().await;

    let mut ids = Vec::new();
    // Allowed; refused by the per-key limit (the edge's second token); refused by the edge.
    let refusals = [StatusCode::TOO_MANY_REQUESTS; 2];
    for expected in [StatusCode::OK].into_iter().chain(refusals) {
        let request = Request::get(format!("http://{addr}/orders?token=query-secret"))
            .header("x-api-key", "api-key-secret")
            .header("authorization", "Bearer bearer-secret")
            .body(empty())
            .unwrap();
        let (response, _) = send(request).await;
        assert_eq!(response.status(), expected);
        ids.push(
            response.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    // The access line is written as the response goes out: wait for the third.
    let third = |line: &str| json(line).is_some_and(|j| j["fields"]["request_id"] == *ids[2]);
    binary.line_where(Duration::from_secs(5), third).await;
    let (lines, _) = binary.stop();

    let all = lines.join("\n");
    for secret in ["api-key-secret", "bearer-secret", "query-secret"] {
        assert!(
            !all.contains(secret),
            "{secret} leaked into the logs:\n{all}"
        );
    }
    assert!(
        lines.iter().all(|l| json(l).is_some()),
        "a log line is not JSON"
    );
    let access = access_lines(&lines);
    assert_eq!(access.len(), 3, "{all}");
    for (line, id) in access.iter().zip(&ids) {
        let fields = &line["fields"];
        assert_eq!(fields["request_id"], id.as_str());
        assert_eq!(fields["method"], "GET");
        assert_eq!(fields["path"], "/orders");
        assert_eq!(fields["route"], "default");
        assert_eq!(fields["client_ip"], "127.0.0.1");
        assert!(fields["duration_ms"].as_f64().is_some());
        assert!(line["timestamp"].as_str().is_some());
    }
    assert_eq!(access[0]["fields"]["status"], 200);
    assert_eq!(access[0]["fields"]["upstream"], upstream.url());
    assert_eq!(access[0]["fields"]["remaining"], 0);
    assert_eq!(access[1]["fields"]["status"], 429);
    assert_eq!(access[1]["fields"]["refused_by"], "per-key");
    assert_eq!(access[2]["fields"]["status"], 429);
    assert_eq!(access[2]["fields"]["refused_by"], "edge");
}

/// One worker (the sampling counts per worker), `/free` without limits and `/` with one
/// request an hour per IP.
fn sampled_config(upstream: &TestUpstream, denied: &str) -> String {
    format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\n\
         [log]\nformat = \"json\"\naccess = true\ndenied = \"{denied}\"\n\
         [[limits]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrates = [{{ limit = 1, per = \"1h\" }}]\n\
         [[upstreams]]\nname = \"api\"\nservers = [\"{}\"]\n\
         [[routes]]\nname = \"free\"\npath_prefix = \"/free\"\nupstream = \"api\"\n\
         [[routes]]\nname = \"limited\"\nupstream = \"api\"\nlimits = [\"per-ip\"]\n",
        upstream.url()
    )
}

#[tokio::test]
async fn the_access_lines_of_refusals_are_sampled_one_in_n_or_skipped() {
    let upstream = TestUpstream::ok("ok").await;
    // 12 refusals: with 1/5 the 1st, 6th and 11th are written.
    for (denied, refusals_written) in [("1/5", 3), ("none", 0), ("all", 12)] {
        let config = config_file("denied", &sampled_config(&upstream, denied));
        let binary = RunningBinary::start(&config, "info");
        let addr = binary.json_listen_addr().await;
        assert_eq!(get(&format!("http://{addr}/")).await.0.status(), 200);
        for _ in 0..12 {
            let status = get(&format!("http://{addr}/")).await.0.status();
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        }
        // Lines are written in order on the one worker: once /free's is there, all are.
        assert_eq!(get(&format!("http://{addr}/free")).await.0.status(), 200);
        let last = |line: &str| json(line).is_some_and(|j| j["fields"]["path"] == "/free");
        binary.line_where(Duration::from_secs(5), last).await;
        let (lines, _) = binary.stop();
        let access = access_lines(&lines);
        let statuses: Vec<u64> = (access.iter())
            .map(|j| j["fields"]["status"].as_u64().unwrap())
            .collect();
        let mut expected = vec![200];
        expected.extend(vec![429; refusals_written]);
        expected.push(200);
        assert_eq!(statuses, expected, "denied = {denied:?}");
    }
}

#[test]
fn a_bad_denied_setting_names_its_path_and_the_forms_expected() {
    for bad in ["some", "1/0", "2/10", "1/1000001", "1/x"] {
        let text = format!(
            "[log]\ndenied = \"{bad}\"\n{}",
            one_route_config(&["http://127.0.0.1:9".into()], "")
        );
        let error = ratelimit_proxy::testing::parse_str(&text, "gw.toml").unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "gw.toml: log.denied: expected \"all\", \"none\" or \"1/N\" (one line in N, N from 1 to 1000000), got \"{bad}\""
            )
        );
    }
}

#[tokio::test]
async fn text_logs_off_a_terminal_have_no_colours_and_say_what_started_and_that_it_exited() {
    let upstream = TestUpstream::ok("ok").await;
    let config = format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        one_route_config(&[upstream.url()], "")
    );
    let path = config_file("started", &config);
    let binary = RunningBinary::start(&path, "info");
    let started = binary
        .line_where(Duration::from_secs(20), |l| l.contains(" started "))
        .await
        .expect("a started line");
    let (lines, exited_ok) = binary.stop();
    assert!(exited_ok);
    let all = lines.join("\n");
    assert!(!all.contains('\x1b'), "escape codes in:\n{all}");
    for field in [
        format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        format!("commit=\"{}\"", ratelimit_proxy::testing::COMMIT),
        format!("config={}", path.display()),
        "listeners=http://127.0.0.1:".to_string(),
        "admin=127.0.0.1:".to_string(),
    ] {
        assert!(started.contains(&field), "{field} missing from: {started}");
    }
    let last = lines.last().expect("lines");
    assert!(
        last.contains(" exited ") && last.contains("drain="),
        "{all}"
    );
    let shutting_down = lines.iter().position(|l| l.contains("shutting down"));
    assert!(
        shutting_down.is_some_and(|at| at < lines.len() - 1),
        "{all}"
    );
}

/// docs/operations.md, "Logs": the access lines are target `access`, at info.
#[tokio::test]
async fn rust_log_warn_with_access_at_info_keeps_the_access_lines_alone() {
    let upstream = TestUpstream::ok("ok").await;
    // Nothing at info says where it listens: the port is chosen here.
    let addr = format!("127.0.0.1:{}", support::redis_server::free_port());
    let config = format!(
        // A hash_secret: without one, `warn` has a line about it (docs/configuration.md,
        // "Safety checks").
        "[server]\nlisten = [\"{addr}\"]\n[log]\nformat = \"json\"\naccess = true\n[store]\nhash_secret = \"k\"\n{}",
        one_route_config(&[upstream.url()], "")
    );
    let binary = RunningBinary::start(&config_file("rust-log", &config), "warn,access=info");
    let mut status = None;
    eventually_async(Duration::from_secs(20), async || {
        let request = Request::get(format!("http://{addr}/"))
            .body(empty())
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), client().request(request));
        status = answer.await.ok().and_then(Result::ok).map(|r| r.status());
        status.is_some()
    })
    .await;
    assert_eq!(status.expect("the binary serves"), StatusCode::OK);
    let access = |line: &str| json(line).is_some_and(|j| j["target"] == "access");
    binary.line_where(Duration::from_secs(5), access).await;
    let (lines, _) = binary.stop();
    assert_eq!(access_lines(&lines).len(), 1, "{lines:?}");
    let others: Vec<&String> = lines.iter().filter(|l| !access(l)).collect();
    assert!(others.is_empty(), "{others:?}");
}
