//! `charge` of a `[[limits]]` entry: the forms it takes, and each mistake reported with the
//! file, the key path and what was expected.

use ratelimit_proxy::testing::parse_str;

fn config(store: &str, limit_extra: &str) -> String {
    format!(
        r#"
[server]
listen = ["127.0.0.1:0"]
{store}
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
limits = ["tokens"]
[[limits]]
name = "tokens"
key = ["header:x-api-key"]
algorithm = "fixed_window"
rates = [{{ limit = 1000, per = "1m" }}]
{limit_extra}
"#
    )
}

fn problems(limit_extra: &str) -> Vec<String> {
    problems_with("", limit_extra)
}

fn problems_with(store: &str, limit_extra: &str) -> Vec<String> {
    let error =
        parse_str(&config(store, limit_extra), "gw.toml").expect_err("config should be rejected");
    error.to_string().lines().map(str::to_string).collect()
}

#[test]
fn every_form_of_the_issue_loads() {
    for charge in [
        r#"charge = { reserve = 1000, settle = "json:usage.total_tokens" }"#,
        r#"charge = { settle = "header:x-usage-tokens" }"#,
        r#"charge = { settle = ["json:usage.input_tokens", "json:usage.output_tokens"] }"#,
        r#"charge = { statuses = [401, 403] }"#,
        r#"charge = { statuses = ["4xx", 500] }"#,
        r#"charge = { refund = ["upstream_error", "5xx"] }"#,
        r#"charge = { reserve = 3 }"#,
    ] {
        let text = config("", charge);
        parse_str(&text, "gw.toml").unwrap_or_else(|e| panic!("{charge}: {e}"));
    }
}

#[test]
fn mistakes_name_the_key_and_what_was_expected() {
    let cases = [
        (
            "charge = {}",
            "gw.toml: limits[0].charge: expected at least one of reserve, settle, statuses or refund",
        ),
        (
            "charge = { reserve = 0 }",
            "gw.toml: limits[0].charge.reserve: expected",
        ),
        (
            r#"charge = { settle = "body:usage" }"#,
            "gw.toml: limits[0].charge.settle: expected \"header:<name>\", \"json:<field.path>\" or an array of \"json:\" fields, got \"body:usage\"",
        ),
        (
            r#"charge = { settle = "header:x usage" }"#,
            "gw.toml: limits[0].charge.settle: expected a header name after \"header:\"",
        ),
        (
            r#"charge = { settle = ["json:usage.a", "header:x-b"] }"#,
            "gw.toml: limits[0].charge.settle[1]: expected a \"json:<field.path>\" string",
        ),
        (
            r#"charge = { settle = ["json:usage.a", "json:usage.a"] }"#,
            "gw.toml: limits[0].charge.settle[1]: expected each field once",
        ),
        (
            r#"charge = { settle = "json:usage..total" }"#,
            "gw.toml: limits[0].charge.settle: expected a field path",
        ),
        (
            r#"charge = { statuses = [] }"#,
            "gw.toml: limits[0].charge.statuses: expected at least one status",
        ),
        (
            r#"charge = { statuses = [401, "6xx"] }"#,
            "gw.toml: limits[0].charge.statuses[1]: expected a status class \"1xx\" to \"5xx\", got \"6xx\"",
        ),
        (
            r#"charge = { statuses = [99] }"#,
            "gw.toml: limits[0].charge.statuses[0]: expected a status from 100 to 599",
        ),
        (
            r#"charge = { refund = ["upstream_errors"] }"#,
            "gw.toml: limits[0].charge.refund[0]: expected \"upstream_error\" or a status",
        ),
        (
            r#"charge = { reserve = 1, settle = "json:a", refunds = ["5xx"] }"#,
            "unknown field `refunds`",
        ),
    ];
    for (charge, expected) in cases {
        let lines = problems(charge);
        assert!(
            lines.iter().any(|line| line.contains(expected)),
            "{charge}: {lines:?}"
        );
    }
}

#[test]
fn a_charge_is_refused_on_an_approximate_limit() {
    let redis = "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"";
    let lines = problems_with(
        redis,
        "consistency = \"approximate\"\ncharge = { statuses = [401] }",
    );
    assert!(
        lines.iter().any(|line| line.starts_with(
            "gw.toml: limits[0].charge: a limit with a charge must be consistency = \"exact\""
        )),
        "{lines:?}"
    );
}

#[test]
fn a_charge_on_a_sliding_log_is_refused_with_redis_and_loads_in_memory() {
    let redis = "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"";
    let text =
        config(redis, "charge = { statuses = [401] }").replace("fixed_window", "sliding_log");
    let error = parse_str(&text, "gw.toml").expect_err("refused with Redis");
    assert!(
        error.to_string().contains(
            "gw.toml: limits[0].charge: a sliding_log limit with a charge needs [store] backend = \"memory\""
        ),
        "{error}"
    );
    let text = config("", "charge = { statuses = [401] }").replace("fixed_window", "sliding_log");
    parse_str(&text, "gw.toml").unwrap_or_else(|e| panic!("{e}"));
}
