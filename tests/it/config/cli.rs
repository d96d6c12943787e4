//! The command line through the real binary: `--version`, `check`'s safety warnings and
//! `--strict`, `health` against a running gateway and against nothing, `demo` refusing a
//! config, and `${VAR}` expanded from the process's environment when serving.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use http::StatusCode;
use support::binary::{RunningBinary, config_file, json};
use support::*;

const BINARY: &str = env!("CARGO_BIN_EXE_ratelimit-proxy");

/// The binary with `args`, its environment only `env` (never this process's, which tests
/// running in parallel share): exit success, stdout, stderr.
fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(BINARY)
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (status.success(), text(stdout), text(stderr))
}

/// `run` off the async runtime: the gateway the command talks to runs on it.
async fn run_blocking(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args, &[])
    })
    .await
    .unwrap()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn version_names_the_package_version_and_the_commit() {
    let (ok, stdout, _) = run(&["--version"], &[]);
    assert!(ok);
    let commit = ratelimit_proxy::testing::COMMIT;
    assert!(!commit.is_empty());
    assert_eq!(
        stdout.trim_end(),
        format!("ratelimit-proxy {} ({commit})", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn demo_refuses_a_config_instead_of_ignoring_it() {
    for args in [
        &["demo", "--config", "gw.toml"][..],
        &["--config", "gw.toml", "demo", "--listen", "127.0.0.1:0"],
    ] {
        let (ok, stdout, stderr) = run(args, &[]);
        assert!(!ok, "{stdout}{stderr}");
        assert!(
            stderr.starts_with("error: demo serves its own built-in config and takes no --config"),
            "{stderr}"
        );
        assert!(!stdout.contains("demo:"), "it started serving: {stdout}");
    }
}

/// Every warning `check` knows, in one config that is otherwise valid.
const CARELESS: &str = r#"
[admin]
listen = "0.0.0.0:9090"
[client_ip]
trusted_proxies = ["0.0.0.0/0"]
[store]
hash_secret = "change-me"
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
[[limits]]
name = "forgotten"
key = ["ip"]
rates = [{ limit = 1, per = "1s" }]
"#;

#[test]
fn check_warns_about_each_unsafe_setting_and_strict_fails_on_them() {
    let path = config_file("cli-careless", CARELESS);
    let file = path_str(&path);
    let (ok, stdout, stderr) = run(&["check", "--config", file], &[]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("OK (1 routes, 1 upstreams)"), "{stdout}");
    let warnings: Vec<&str> = stderr.lines().collect();
    let expected = [
        "store.hash_secret: is the example's \"change-me\"",
        "client_ip.trusted_proxies[0]: \"0.0.0.0/0\" is wider than 10.0.0.0/8",
        "admin.listen: \"0.0.0.0:9090\" is not a loopback address",
        "limits[0]: limit \"forgotten\" is used by no route",
    ];
    assert_eq!(warnings.len(), expected.len(), "{stderr}");
    for (line, start) in warnings.iter().zip(expected) {
        assert!(
            line.starts_with(&format!("warning: {file}: {start}")),
            "{line}"
        );
    }

    let (ok, _, strict) = run(&["check", "--strict", "--config", file], &[]);
    assert!(!ok, "{strict}");
    assert!(
        strict.starts_with(&stderr),
        "the same warnings first: {strict}"
    );
    assert!(
        strict.ends_with(&format!(
            "error: {file}: 4 warnings, and --strict makes them errors\n"
        )),
        "{strict}"
    );
}

#[test]
fn strict_passes_a_config_without_warnings() {
    let careful = CARELESS
        .replace("0.0.0.0:9090", "127.0.0.1:9090")
        .replace("0.0.0.0/0", "10.0.0.0/8")
        .replace("change-me", "a-long-random-value")
        .replace(
            "upstream = \"api\"",
            "upstream = \"api\"\nlimits = [\"forgotten\"]",
        );
    let path = config_file("cli-careful", &careful);
    let (ok, stdout, stderr) = run(&["check", "--strict", "--config", path_str(&path)], &[]);
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stderr, "");
}

#[test]
fn check_reports_every_problem_of_a_config_at_once() {
    let broken = CARELESS
        .replace("0.0.0.0:9090", "localhost:9090")
        .replace("\"0.0.0.0/0\"", "\"10.0.0.0/33\"")
        .replace("upstream = \"api\"", "upstream = \"apii\"")
        .replace("per = \"1s\"", "per = \"1 second\"")
        .replace("http://127.0.0.1:9001", "${NOT_SET}");
    let path = config_file("cli-broken", &broken);
    let file = path_str(&path);
    let (ok, _, stderr) = run(&["check", "--config", file], &[]);
    assert!(!ok);
    let paths: Vec<&str> = stderr
        .lines()
        .map(|line| line.strip_prefix(&format!("{file}: ")).unwrap_or(line))
        .map(|line| line.split(": ").next().unwrap())
        .collect();
    for path in [
        "upstreams[0].servers[0]",
        "client_ip.trusted_proxies[0]",
        "admin.listen",
        "limits[0].rates[0].per",
        "routes[0].upstream",
    ] {
        assert!(paths.contains(&path), "{path} missing from:\n{stderr}");
    }
    assert_eq!(paths.len(), 5, "{stderr}");
}

#[tokio::test]
async fn serving_takes_variables_from_its_environment_and_logs_its_warnings() {
    let upstream = TestUpstream::ok("from the upstream").await;
    let config = "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\nformat = \"json\"\n[[upstreams]]\nname = \"api\"\nservers = [\"${APP_UPSTREAM}\"]\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n";
    let path = config_file("cli-env", config);
    let binary = RunningBinary::start_with_env(&path, "info", &[("APP_UPSTREAM", &upstream.url())]);
    let addr = binary.json_listen_addr().await;
    let (response, body) = get(&format!("http://{addr}/")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(&body[..], b"from the upstream");
    let (lines, _) = binary.stop();
    let warned = lines.iter().filter_map(|l| json(l)).any(|line| {
        line["level"] == "WARN"
            && line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("store.hash_secret: not set"))
    });
    assert!(warned, "{lines:?}");
}

#[tokio::test]
async fn health_exits_0_for_a_running_gateway_and_1_for_nothing_listening() {
    let upstream = TestUpstream::ok("ok").await;
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n{}",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    let admin = gateway.admin_addr.unwrap().to_string();

    let (ok, stdout, stderr) =
        run_blocking(vec!["health".into(), "--admin".into(), admin.clone()]).await;
    assert!(ok, "{stderr}");
    assert_eq!(
        stdout,
        format!("ok: GET /healthz at {admin} answered 200\n")
    );

    // The address from a config's [admin] listen.
    let with_admin = format!(
        "[admin]\nlisten = \"{admin}\"\n{}",
        one_route_config(&[upstream.url()], "")
    );
    let path = config_file("cli-health", &with_admin);
    let args = vec![
        "health".into(),
        "--config".into(),
        path_str(&path).to_string(),
    ];
    let (ok, _, stderr) = run_blocking(args).await;
    assert!(ok, "{stderr}");

    let nothing = format!("127.0.0.1:{}", support::redis_server::free_port());
    let args = vec![
        "health".into(),
        "--admin".into(),
        nothing.clone(),
        "--timeout".into(),
        "1s".into(),
    ];
    let started = std::time::Instant::now();
    let (ok, stdout, stderr) = run_blocking(args).await;
    assert!(!ok, "{stdout}");
    assert!(
        stderr.starts_with(&format!(
            "error: cannot connect to the admin listener at {nothing}: "
        )),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    gateway.stop().await.unwrap().unwrap();
}
