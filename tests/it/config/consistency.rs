//! `consistency` and `sync_interval` of `[[limits]]`: what an approximate limit needs, each
//! mistake reported with the file, the key path and what was expected.

use ratelimit_proxy::testing::Consistency;
use ratelimit_proxy::testing::parse_str;

fn config(store: &str, algorithm: &str, extra: &str) -> String {
    format!(
        r#"
[server]
listen = ["127.0.0.1:0"]
[store]
{store}
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
limits = ["global"]
[[limits]]
name = "global"
key = ["global"]
algorithm = "{algorithm}"
rates = [{{ limit = 1000, per = "1m" }}]
{extra}
"#
    )
}

const REDIS: &str = "backend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"";

fn problems(text: &str) -> Vec<String> {
    let error = parse_str(text, "gw.toml").expect_err("config should be rejected");
    error.to_string().lines().map(str::to_string).collect()
}

#[test]
fn approximate_is_refused_for_algorithms_whose_state_is_not_a_count() {
    for algorithm in ["token_bucket", "gcra", "sliding_log"] {
        let lines = problems(&config(REDIS, algorithm, "consistency = \"approximate\""));
        assert_eq!(
            lines,
            [format!(
                "gw.toml: limits[0].consistency: \"approximate\" needs an algorithm whose counts add up: fixed_window or sliding_window, not {algorithm}"
            )]
        );
    }
}

#[test]
fn approximate_fixed_and_sliding_windows_load_with_their_sync_interval() {
    for algorithm in ["fixed_window", "sliding_window"] {
        let extra = "consistency = \"approximate\"\nsync_interval = \"250ms\"";
        let loaded = parse_str(&config(REDIS, algorithm, extra), "gw.toml").unwrap();
        assert_eq!(
            loaded.limits[0].consistency,
            Consistency::Approximate {
                sync_interval: std::time::Duration::from_millis(250)
            }
        );
    }
    let exact = parse_str(&config(REDIS, "fixed_window", ""), "gw.toml").unwrap();
    assert_eq!(exact.limits[0].consistency, Consistency::Exact);
}

#[test]
fn a_sync_interval_must_be_above_zero_at_most_ten_seconds_and_a_duration() {
    let cases = [
        ("0s", "expected a duration greater than zero"),
        (
            "11s",
            "expected a duration above 0 and at most \"10s\", got 11s",
        ),
        (
            "often",
            "expected a duration like \"250ms\", \"10s\", \"1m\", \"1h\" or \"1d\", got \"often\"",
        ),
    ];
    for (interval, expected) in cases {
        let extra = format!("consistency = \"approximate\"\nsync_interval = \"{interval}\"");
        let lines = problems(&config(REDIS, "fixed_window", &extra));
        assert_eq!(
            lines,
            [format!("gw.toml: limits[0].sync_interval: {expected}")]
        );
    }
}

#[test]
fn a_sync_interval_without_approximate_and_an_unknown_consistency_are_refused() {
    let lines = problems(&config(REDIS, "fixed_window", "sync_interval = \"1s\""));
    assert_eq!(
        lines,
        ["gw.toml: limits[0].sync_interval: only used with consistency = \"approximate\""]
    );
    let lines = problems(&config(REDIS, "fixed_window", "consistency = \"eventual\""));
    assert_eq!(
        lines,
        ["gw.toml: limits[0].consistency: expected \"exact\" or \"approximate\", got \"eventual\""]
    );
}

#[test]
fn approximate_loads_on_a_cluster_and_is_exact_in_effect_on_memory() {
    let cluster = "backend = \"redis-cluster\"\nurls = [\"redis://127.0.0.1:7000\"]";
    let loaded = parse_str(
        &config(cluster, "fixed_window", "consistency = \"approximate\""),
        "gw.toml",
    );
    assert!(loaded.is_ok(), "{:?}", loaded.err().map(|e| e.to_string()));
    // The memory store is local already: approximate loads, and counts exactly.
    let memory = "backend = \"memory\"";
    assert!(
        parse_str(
            &config(memory, "fixed_window", "consistency = \"approximate\""),
            "gw.toml"
        )
        .is_ok()
    );
}
