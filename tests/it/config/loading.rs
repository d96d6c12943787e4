//! The config contract through the real binary and the library: the example passes `check`,
//! and each kind of mistake is reported with the file and its key path.

use crate::support;

use std::path::Path;

use ratelimit_proxy::testing::parse_str;
use support::check_config as check;

fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rlp-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const VALID: &str = r#"
[server]
listen = ["127.0.0.1:0"]
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
"#;

#[test]
fn the_example_config_passes_check() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let (ok, text) = check(&example);
    assert!(ok, "{text}");
    assert!(text.contains("OK"), "{text}");
}

#[test]
fn check_exits_1_and_names_file_and_key_path() {
    let path = write_config(
        "unknown-key.toml",
        &VALID.replace("[server]", "[server]\nlisten_adress = \"x\""),
    );
    let (ok, text) = check(&path);
    assert!(!ok);
    assert!(text.contains("unknown-key.toml"), "{text}");
    assert!(text.contains("server.listen_adress"), "{text}");
    assert!(text.contains("unknown field"), "{text}");
}

#[test]
fn check_reports_a_missing_file() {
    let (ok, text) = check(Path::new("/nonexistent/gw.toml"));
    assert!(!ok);
    assert!(text.contains("/nonexistent/gw.toml"), "{text}");
}

fn problems(text: &str) -> Vec<String> {
    let error = parse_str(text, "gw.toml").expect_err("config should be rejected");
    let rendered = error.to_string();
    assert!(
        rendered.lines().all(|l| l.starts_with("gw.toml: ")),
        "{rendered}"
    );
    rendered.lines().map(str::to_string).collect()
}

#[test]
fn unknown_key_in_a_nested_table_names_its_path() {
    let lines = problems(&VALID.replace(
        "upstream = \"api\"",
        "upstream = \"api\"\npath_prefx = \"/\"",
    ));
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains("routes[0].path_prefx"), "{lines:?}");
}

#[test]
fn bad_duration_names_its_path_and_the_expected_form() {
    let lines = problems(&VALID.replace("[server]", "[server]\nidle_timeout = \"10 seconds\""));
    assert_eq!(
        lines,
        [
            r#"gw.toml: server.idle_timeout: expected a duration like "250ms", "10s", "1m", "1h" or "1d", got "10 seconds""#
        ]
    );
}

#[test]
fn workers_must_be_a_whole_number_from_1_to_1024() {
    for bad in ["0", "1025", "-2"] {
        let lines = problems(&VALID.replace("[server]", &format!("[server]\nworkers = {bad}")));
        assert_eq!(
            lines,
            [format!(
                "gw.toml: server.workers: expected a whole number from 1 to 1024, got {bad}"
            )]
        );
    }
    let text = VALID.replace("[server]", "[server]\nworkers = \"auto\"");
    let lines = problems(&text);
    assert!(lines[0].contains("server.workers"), "{lines:?}");
    let config = parse_str(
        &VALID.replace("[server]", "[server]\nworkers = 3"),
        "gw.toml",
    );
    assert_eq!(config.unwrap().server.workers, 3);
    let default = parse_str(VALID, "gw.toml").unwrap().server.workers;
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(default, cpus.min(1024));
}

#[test]
fn unknown_upstream_names_its_path_and_the_known_ones() {
    let lines = problems(&VALID.replace("upstream = \"api\"", "upstream = \"apii\""));
    assert_eq!(
        lines,
        [r#"gw.toml: routes[0].upstream: unknown upstream "apii"; expected one of ["api"]"#]
    );
}

#[test]
fn duplicate_route_name_names_both_entries() {
    let text = format!("{VALID}\n[[routes]]\nname = \"default\"\nupstream = \"api\"\n");
    let lines = problems(&text);
    assert_eq!(
        lines,
        [r#"gw.toml: routes[1].name: duplicate name "default"; routes[0] already uses it"#]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = r#"
[server]
listen = ["localhost"]
max_header_bytes = 10
[[upstreams]]
name = "api"
servers = ["ftp://x", "http://127.0.0.1:1/path"]
balance = "random"
health_check = { path = "healthz", interval = "0s" }
[[routes]]
name = "a"
upstream = "nope"
methods = ["G E T"]
"#;
    let all = problems(text).join("\n");
    for path in [
        "server.listen[0]",
        "server.max_header_bytes",
        "upstreams[0].servers[0]",
        "upstreams[0].servers[1]",
        "upstreams[0].balance",
        "upstreams[0].health_check.path",
        "upstreams[0].health_check.interval",
        "routes[0].upstream",
        "routes[0].methods[0]",
    ] {
        assert!(
            all.contains(&format!("gw.toml: {path}: ")),
            "{path} missing from:\n{all}"
        );
    }
}

#[test]
fn redis_store_mistakes_name_their_key_and_what_was_expected() {
    let limit = "[[limits]]\nname = \"l\"\nkey = [\"ip\"]\nalgorithm = \"sliding_window\"\nrates = [{ limit = 200000, per = \"1d\" }]\n";
    let cases: [(&str, &str, &str); 13] = [
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://h:1\"\ntimeout = \"2m\"",
            "store.timeout",
            "at most \"1m\"",
        ),
        ("[store]\nbackend = \"redis\"", "store.url", "needs url"),
        (
            "[store]\nready_requires_redis = true",
            "store.ready_requires_redis",
            "only applies to backend",
        ),
        (
            "[store]\nconnect_timeout = \"1s\"",
            "store.connect_timeout",
            "only applies to backend",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://h:1\"\nconnect_timeout = \"soon\"",
            "store.connect_timeout",
            "",
        ),
        (
            "[store]\nurl = \"redis://127.0.0.1:6379\"",
            "store.url",
            "only applies to backend",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"http://127.0.0.1:6379\"",
            "store.url",
            "redis:// or rediss://",
        ),
        (
            "[store]\nbackend = \"redis-cluster\"\nurls = []",
            "store.urls",
            "at least one seed node",
        ),
        (
            "[store]\nbackend = \"redis-cluster\"\nurls = [\"redis://a:1\", \"tcp://b\"]",
            "store.urls[1]",
            "redis://",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://h:1\"\nkey_prefix = \"{x}\"",
            "store.key_prefix",
            "hash tag",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://h:1\"\nfallback_instances = 0",
            "store.fallback_instances",
            "expected",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://h:1\"\nca_file = \"/nonexistent.pem\"",
            "store.ca_file",
            "cannot read",
        ),
        (
            "[store]\nbackend = \"redis\"\nurl = \"redis://h:1\"",
            "limits[0].rates",
            "2^53",
        ),
    ];
    for (section, path, expected) in cases {
        let lines = problems(&format!("{VALID}\n{section}\n{limit}"));
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("gw.toml: {path}: ")) && l.contains(expected)),
            "{section}: {lines:?}"
        );
    }
    let hash_without_redis = "[plans]\nkey = \"ip\"\nredis_hash = \"tiers\"\n";
    let lines = problems(&format!("{VALID}\n{hash_without_redis}"));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("plans.redis_hash") && l.contains("needs store.backend")),
        "{lines:?}"
    );
}

#[test]
fn a_password_in_a_bad_redis_url_is_not_echoed() {
    let section = "[store]\nbackend = \"redis\"\nurl = \"redis://u:hunter2@host:notaport/0\"\n";
    let lines = problems(&format!("{VALID}\n{section}"));
    assert!(lines.iter().any(|l| l.contains("store.url")), "{lines:?}");
    assert!(lines.iter().all(|l| !l.contains("hunter2")), "{lines:?}");
}

#[test]
fn a_bad_log_format_names_its_path() {
    let lines = problems(&format!("{VALID}\n[log]\nformat = \"xml\"\n"));
    assert_eq!(
        lines,
        [r#"gw.toml: log.format: expected "text" or "json", got "xml""#]
    );
}

#[test]
fn limit_mistakes_name_their_paths() {
    let text = format!(
        r#"{}
[[limits]]
name = "per-key"
key = ["header:x-api-key", "body:x"]
missing = "maybe"
algorithm = "leaky"
rates = [{{ limit = 0, per = "1 minute" }}]
action = "delay"

[[limits]]
name = "log"
key = ["ip"]
algorithm = "sliding_log"
rates = [{{ limit = 5000, per = "1m", burst = 10 }}]
exempt_lists = ["nobody"]
tiers = {{ pro = "lots" }}

[[limits]]
name = "small"
key = ["ip"]
rates = [{{ limit = 5, per = "1m" }}]
on_error = "explode"
max_delay = "1s"
"#,
        VALID.replace(
            "upstream = \"api\"",
            "upstream = \"api\"\nlimits = [\"small\", \"nope\"]\ncost = 6"
        )
    );
    let all = problems(&text).join("\n");
    for path in [
        "limits[0].key[1]",
        "limits[0].missing",
        "limits[0].algorithm",
        "limits[0].rates[0].limit",
        "limits[0].rates[0].per",
        "limits[1].rates[0].limit",
        "limits[1].rates[0].burst",
        "limits[1].exempt_lists[0]",
        "limits[1].tiers.pro",
        "limits[2].on_error",
        "limits[2].max_delay",
        "routes[0].limits[1]",
        "routes[0].cost",
    ] {
        assert!(
            all.contains(&format!("gw.toml: {path}: ")),
            "{path} missing from:\n{all}"
        );
    }
    assert!(all.contains("could never pass"), "{all}");
}

#[test]
fn a_limit_name_must_fit_in_a_quoted_header_string() {
    let limit = |name: &str| {
        format!(
            "[[limits]]\nname = {name}\nkey = [\"ip\"]\nrates = [{{ limit = 5, per = \"1m\" }}]\n"
        )
    };
    let names = [
        r#""team \"a\"""#,
        r#""back\\slash""#,
        r#""límite""#,
        r#""tab\there""#,
    ];
    let text = format!("{VALID}\n{}", names.map(limit).join("\n"));
    let lines = problems(&text);
    assert_eq!(lines.len(), names.len(), "{lines:#?}");
    for (i, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!(
                "gw.toml: limits[{i}].name: expected printable ASCII"
            )),
            "{line}"
        );
    }
    assert!(lines[2].ends_with(r#"got "límite""#), "{}", lines[2]);
    let fine = format!("{VALID}\n{}", limit(r#""per key v2.1 (a/b:c)""#));
    let config = parse_str(&fine, "gw.toml").expect("a printable name is accepted");
    assert_eq!(&*config.limits[0].name, "per key v2.1 (a/b:c)");
}

#[test]
fn delay_needs_a_bucket_algorithm_and_plans_need_known_tiers() {
    let dir = std::env::temp_dir().join(format!("rlp-config-plans-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plans.toml"), "\"k1\" = \"gold\"\n").unwrap();
    let text = format!(
        r#"{VALID}
[[limits]]
name = "window"
key = ["ip"]
algorithm = "fixed_window"
rates = [{{ limit = 5, per = "1m" }}]
action = "delay"
tiers = {{ pro = [{{ limit = 50, per = "1m" }}] }}

[plans]
key = "header:x-api-key"
file = "plans.toml"
"#
    );
    let source = dir.join("gw.toml");
    let error = parse_str(&text, source.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("limits[0].action: \"delay\" needs algorithm token_bucket or gcra"),
        "{error}"
    );
    assert!(
        error.contains("plans.file: plans.toml: tier \"gold\" is not defined"),
        "{error}"
    );
}

#[test]
fn toml_syntax_errors_give_line_and_column() {
    let error = parse_str("[server\nlisten = 1", "gw.toml")
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("gw.toml: line 1, column"), "{error}");
}

#[test]
fn client_ip_lists_and_edge_mistakes_name_their_paths() {
    let text = format!(
        r#"{VALID}
[client_ip]
trusted_proxies = ["10.0.0.0/8", "10.0.0.0/33"]
header = "x-client-ip"
ipv6_prefix = 129

[ip_lists]
partners = ["198.51.100.0/24", "nope"]
weird = 5
from_file = {{ file = "/nonexistent/list.txt" }}

[edge]
rate = "200/sec"
burst = 0
deny = ["blockd"]
overrides = [{{ list = "partners", exempt = true, rate = "5/s" }}, {{ list = "partners" }}]
"#
    );
    let all = problems(&text).join("\n");
    for path in [
        "client_ip.trusted_proxies[1]",
        "client_ip.header",
        "client_ip.ipv6_prefix",
        "ip_lists.partners[1]",
        "ip_lists.weird",
        "ip_lists.from_file.file",
        "edge.rate",
        "edge.burst",
        "edge.deny[0]",
        "edge.overrides[0]",
        "edge.overrides[1]",
    ] {
        assert!(
            all.contains(&format!("gw.toml: {path}: ")),
            "{path} missing from:\n{all}"
        );
    }
    assert!(all.contains(r#"unknown ip list "blockd""#), "{all}");
}

#[test]
fn a_bad_admin_address_names_its_path() {
    let lines = problems(&format!("{VALID}\n[admin]\nlisten = \"localhost\"\n"));
    assert_eq!(
        lines,
        [r#"gw.toml: admin.listen: expected IP:port such as "127.0.0.1:9090", got "localhost""#]
    );
}

/// A limit of `rates` windows, `name`, with a `big` tier of `tier_rates` windows.
fn limit_with_windows(name: &str, rates: usize, tier_rates: usize) -> String {
    let rates_of = |n: usize| {
        let list: Vec<String> = (1..=n)
            .map(|i| format!("{{ limit = {i}, per = \"{i}h\" }}"))
            .collect();
        list.join(", ")
    };
    format!(
        "[[limits]]\nname = \"{name}\"\nkey = [\"ip\"]\nrates = [{}]\ntiers = {{ big = [{}] }}\n",
        rates_of(rates),
        rates_of(tier_rates)
    )
}

#[test]
fn a_route_checks_at_most_256_windows_counting_each_limits_largest_tier() {
    let with_limits = |a: (usize, usize), b: (usize, usize)| {
        format!(
            "{}\n{}\n{}",
            VALID.replace(
                "upstream = \"api\"",
                "upstream = \"api\"\nlimits = [\"a\", \"b\"]"
            ),
            limit_with_windows("a", a.0, a.1),
            limit_with_windows("b", b.0, b.1)
        )
    };
    let at_most = with_limits((200, 6), (50, 56));
    if let Err(error) = parse_str(&at_most, "gw.toml") {
        panic!("256 windows should pass: {error}");
    }
    let beyond = problems(&with_limits((200, 6), (50, 57))).join("\n");
    assert!(
        beyond.contains("gw.toml: routes[0].limits: these limits have up to 257 windows"),
        "{beyond}"
    );
}

/// The Redis store's defaults: `timeout` 50 ms, `connect_timeout` 1 s, limits fall back to
/// `local` (each instance enforcing its share alone), `/readyz` does not wait for Redis.
#[test]
fn redis_store_defaults() {
    let text = format!(
        "{VALID}\n[store]\nbackend = \"redis\"\nurl = \"redis://h:1\"\n[[limits]]\nname = \"l\"\nkey = [\"ip\"]\nrates = [{{ limit = 5, per = \"1m\" }}]\n"
    );
    let config = ratelimit_proxy::testing::parse_str(&text, "gw.toml").unwrap();
    let redis = config.store.redis.as_ref().unwrap();
    assert_eq!(redis.timeout, std::time::Duration::from_millis(50));
    assert_eq!(redis.connect_timeout, std::time::Duration::from_secs(1));
    assert!(!config.store.ready_requires_redis);
    assert_eq!(
        config.limits[0].on_error,
        ratelimit_proxy::testing::OnError::Local
    );
}

#[test]
fn request_form_mistakes_name_their_paths() {
    let text = r#"
[server]
listen = ["127.0.0.1:0"]
underscores_in_headers = "ignore"
escaped_slashes = "decode"
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[limits]]
name = "legacy"
key = ["header:x_api_key"]
rates = [{ limit = 1, per = "1s" }]
[[routes]]
name = "login"
path_prefix = "//login/./x"
methods = ["post", "P0ST"]
upgrades = ["websocket", "h2c", "bad proto"]
upstream = "api"
limits = ["legacy"]
[[routes]]
name = "bad"
path_prefix = "/a%zz"
upstream = "api"
"#;
    let lines = problems(text);
    let expected = [
        r#"gw.toml: server.underscores_in_headers: expected "drop", "allow" or "reject", got "ignore""#,
        r#"gw.toml: server.escaped_slashes: expected "keep" or "reject", got "decode""#,
        r#"gw.toml: limits[0].key[0]: the field name "x_api_key" has an underscore: set [server] underscores_in_headers = "allow" to key on it"#,
        r#"gw.toml: routes[0].path_prefix: expected a path in the canonical form requests are matched in, got "//login/./x"; write "/login/x""#,
        r#"gw.toml: routes[0].methods[1]: expected an HTTP method such as "GET" (letters, `_` and `-`), got "P0ST""#,
        r#"gw.toml: routes[0].upgrades[1]: h2c is never passed as an upgrade: its connection would carry HTTP/2 requests past every limit"#,
        r#"gw.toml: routes[0].upgrades[2]: expected a protocol name such as "websocket", got "bad proto""#,
        r#"gw.toml: routes[1].path_prefix: expected a path such as "/v1/", got "/a%zz": the path has a "%" that is not followed by two hex digits"#,
    ];
    for line in expected {
        assert!(
            lines.iter().any(|l| l == line),
            "{line}\nnot in\n{}",
            lines.join("\n")
        );
    }
    assert_eq!(lines.len(), expected.len(), "{}", lines.join("\n"));
    let allowed = text
        .replace("\"ignore\"", "\"allow\"")
        .replace("escaped_slashes = \"decode\"\n", "");
    assert!(!problems(&allowed).iter().any(|l| l.contains("limits[0]")));
}

#[test]
fn allow_trace_is_a_boolean_and_a_trace_route_needs_it() {
    let text = VALID.replace("[server]", "[server]\nallow_trace = \"yes\"");
    let lines = problems(&text);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("server.allow_trace") && lines[0].contains("expected a boolean"),
        "{lines:?}"
    );
    let routed = VALID.replace(
        "upstream = \"api\"",
        "methods = [\"GET\", \"TRACE\"]\nupstream = \"api\"",
    );
    assert_eq!(
        problems(&routed),
        [
            "gw.toml: routes[0].methods[1]: TRACE is answered 405 before routing: set [server] allow_trace = true to route it"
        ]
    );
    let allowed = routed.replace("[server]", "[server]\nallow_trace = true");
    parse_str(&allowed, "gw.toml").expect("TRACE routed when allowed");
}

/// Every deadline of issue 31's table: its default, and a bad value named by its key path.
#[test]
fn the_deadlines_have_defaults_and_bad_values_name_their_paths() {
    use std::time::Duration;
    let config = parse_str(VALID, "gw.toml").unwrap();
    let server = &config.server;
    assert_eq!(server.body_read_timeout, Duration::from_secs(60));
    assert_eq!(server.send_timeout, Duration::from_secs(60));
    assert_eq!(server.tunnel_idle_timeout, Duration::from_secs(3600));
    assert_eq!(server.tunnel_send_timeout, Duration::from_secs(300));
    assert_eq!(config.upstreams[0].read_timeout, Duration::from_secs(60));

    let set = VALID
        .replace("[server]", "[server]\nsend_timeout = \"2s\"\nbody_read_timeout = \"3s\"\ntunnel_idle_timeout = \"4m\"\ntunnel_send_timeout = \"5m\"")
        .replace("servers = [", "read_timeout = \"250ms\"\nservers = [");
    let config = parse_str(&set, "gw.toml").unwrap();
    assert_eq!(config.server.send_timeout, Duration::from_secs(2));
    assert_eq!(config.server.body_read_timeout, Duration::from_secs(3));
    assert_eq!(config.server.tunnel_idle_timeout, Duration::from_secs(240));
    assert_eq!(config.server.tunnel_send_timeout, Duration::from_secs(300));
    assert_eq!(config.upstreams[0].read_timeout, Duration::from_millis(250));

    let bad = VALID
        .replace("[server]", "[server]\nsend_timeout = \"0s\"\nbody_read_timeout = \"soon\"\ntunnel_idle_timeout = 5\ntunnel_send_timeout = \"1 h\"")
        .replace("servers = [", "read_timeout = \"-1s\"\nservers = [");
    let error = parse_str(&bad, "gw.toml").unwrap_err().to_string();
    // A number where a string belongs is a syntax error, reported alone: the rest is checked
    // once the file parses.
    assert!(
        error.contains("server.tunnel_idle_timeout") && error.contains("expected a string"),
        "{error}"
    );
    let lines = problems(&bad.replace("tunnel_idle_timeout = 5\n", ""));
    assert_eq!(
        lines,
        [
            "gw.toml: server.body_read_timeout: expected a duration like \"250ms\", \"10s\", \"1m\", \"1h\" or \"1d\", got \"soon\"",
            "gw.toml: server.send_timeout: expected a duration greater than zero",
            "gw.toml: server.tunnel_send_timeout: expected a duration like \"250ms\", \"10s\", \"1m\", \"1h\" or \"1d\", got \"1 h\"",
            "gw.toml: upstreams[0].read_timeout: expected a duration like \"250ms\", \"10s\", \"1m\", \"1h\" or \"1d\", got \"-1s\"",
        ]
    );
}

#[test]
fn plans_lists_name_known_lists_and_tiers() {
    let section = r#"
[ip_lists]
office_nat = ["203.0.113.0/24"]
[[limits]]
name = "per-ip"
key = ["ip"]
rates = [{ limit = 5, per = "1m" }]
tiers = { nat = [{ limit = 100, per = "1m" }] }
[plans]
key = "ip"
lists = [{ list = "ofice_nat", tier = "nat" }, { list = "office_nat", tier = "natt" }]
"#;
    let lines = problems(&format!("{VALID}\n{section}"));
    for (path, expected) in [
        ("plans.lists[0].list", "unknown ip list \"ofice_nat\""),
        ("plans.lists[1].tier", "tier \"natt\" is not defined"),
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("gw.toml: {path}: ")) && l.contains(expected)),
            "{path}: {lines:?}"
        );
    }
    let good = section
        .replace("ofice_nat", "office_nat")
        .replace("natt", "nat");
    assert!(parse_str(&format!("{VALID}\n{good}"), "gw.toml").is_ok());
}

#[test]
fn the_example_gives_the_office_nat_a_higher_exact_limit() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let config = ratelimit_proxy::testing::load(&example).unwrap();
    let plans = config.plans.as_ref().unwrap();
    let office = plans.tier_by_address("203.0.113.9".parse().unwrap());
    let elsewhere = plans.tier_by_address("192.0.2.1".parse().unwrap());
    let per_key = config
        .limits
        .iter()
        .find(|l| &*l.name == "per-key")
        .unwrap();
    let per_minute = |tier| per_key.windows_for(tier).unwrap()[0].rate.limit;
    assert_eq!(office, Some("nat"));
    assert!(
        per_minute(office) >= 10 * per_minute(elsewhere),
        "{office:?}: {}, {elsewhere:?}: {}",
        per_minute(office),
        per_minute(elsewhere)
    );
}

#[test]
fn check_warns_about_lists_that_overlap_with_other_outcomes() {
    let section = r#"
[ip_lists]
office_nat = ["203.0.113.0/24"]
vpn = ["203.0.113.128/25", "10.8.0.0/16"]
[edge]
rate = "10/s"
overrides = [{ list = "office_nat", rate = "100/s" }, { list = "vpn", exempt = true }]
[[limits]]
name = "per-ip"
key = ["ip"]
rates = [{ limit = 5, per = "1m" }]
tiers = { nat = [{ limit = 100, per = "1m" }], vpn = [{ limit = 50, per = "1m" }] }
[plans]
key = "ip"
lists = [{ list = "office_nat", tier = "nat" }, { list = "vpn", tier = "vpn" }]
"#;
    let path = write_config("overlapping.toml", &format!("{VALID}\n{section}"));
    let (ok, text) = check(&path);
    assert!(ok, "warnings do not fail check: {text}");
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    for at in ["edge.overrides[1]", "plans.lists[1]"] {
        assert!(
            warnings.iter().any(|l| l
                .contains(&format!("{at}: list \"vpn\" overlaps list \"office_nat\""))
                && l.contains("203.0.113.128/25")),
            "{at}: {text}"
        );
    }
    // Only these two overlap; the other warnings are the safety checks' (no hash_secret, a
    // limit no route uses).
    let overlaps = warnings.iter().filter(|l| l.contains(" overlaps list "));
    assert_eq!(overlaps.count(), 2, "{text}");
}
