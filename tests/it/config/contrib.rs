//! The operator files under `contrib/`: the Grafana dashboard and the Prometheus alerting
//! rules parse, every expression in them is valid PromQL, and every metric they select is one
//! a real gateway's `/metrics` exports (read with a real Prometheus text parser).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use promql_parser::parser::{self, Expr};
use serde::Deserialize;
use support::redis_server::RedisServer;
use support::scrape::{exported_names, scrape};
use support::*;

const DASHBOARD: &str = "contrib/grafana/ratelimit-proxy.json";
const ALERTS: &str = "contrib/prometheus/alerts.yml";

fn read(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every metric name a PromQL expression selects.
fn selected_names(expression: &str) -> BTreeSet<String> {
    let expr = parser::parse(expression).unwrap_or_else(|e| panic!("{expression}\n{e}"));
    let mut names = BTreeSet::new();
    collect_names(&expr, &mut names);
    assert!(!names.is_empty(), "selects no metric: {expression}");
    names
}

fn collect_names(expr: &Expr, names: &mut BTreeSet<String>) {
    let mut walk = |inner: &Expr| collect_names(inner, names);
    match expr {
        Expr::Aggregate(e) => {
            walk(&e.expr);
            if let Some(param) = &e.param {
                walk(param);
            }
        }
        Expr::Unary(e) => walk(&e.expr),
        Expr::Binary(e) => {
            walk(&e.lhs);
            walk(&e.rhs);
        }
        Expr::Paren(e) => walk(&e.expr),
        Expr::Subquery(e) => walk(&e.expr),
        Expr::Call(e) => e.args.args.iter().for_each(|arg| walk(arg)),
        Expr::VectorSelector(selector) => {
            let name = selector.name.clone().expect("selectors name their metric");
            names.insert(name);
        }
        Expr::MatrixSelector(matrix) => {
            let name = matrix.vs.name.clone().expect("selectors name their metric");
            names.insert(name);
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// The dashboard's queries as PromQL: its panels' `expr`s, and the selector of each
/// `label_values(SELECTOR, label)` variable, with Grafana's variables given values.
fn dashboard_expressions(dashboard: &serde_json::Value) -> Vec<String> {
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    let mut expressions = Vec::new();
    collect_strings(dashboard, "expr", &mut expressions);
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            let selector = query
                .strip_prefix("label_values(")
                .and_then(|rest| rest.rsplit_once(','))
                .map(|(selector, _)| selector.to_string());
            expressions.push(selector.unwrap_or_else(|| panic!("unknown variable query {query}")));
        }
    }
    // Grafana's own intervals first, then the dashboard's variables (used in regex matchers).
    let given = [
        ("$__rate_interval", "5m"),
        ("$__interval", "1m"),
        ("$__range", "1h"),
    ];
    expressions
        .into_iter()
        .map(|mut expression| {
            for (variable, value) in given {
                expression = expression.replace(variable, value);
            }
            for variable in &variables {
                expression = expression.replace(&format!("${variable}"), ".*");
            }
            assert!(
                !expression.contains('$'),
                "an unknown variable in {expression}"
            );
            expression
        })
        .collect()
}

fn collect_strings(value: &serde_json::Value, key: &str, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match v.as_str() {
                    Some(text) if k == key => found.push(text.to_string()),
                    _ => collect_strings(v, key, found),
                }
            }
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|v| collect_strings(v, key, found))
        }
        _ => {}
    }
}

/// A Prometheus rule file, as much of it as `promtool check rules` needs of an alerting rule.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<AlertingRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AlertingRule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    pending_for: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// The metrics a gateway exports with every part an operator watches: an edge layer, a limit
/// in a Redis store, an upstream, an admin listener; after one allowed and one refused request
/// and a reload. A family appears once it has a series: the breaker gauge with a Redis store,
/// the reload and store error counters from the start, at 0.
async fn exported_by_a_gateway(redis: &RedisServer) -> BTreeSet<String> {
    let upstream = TestUpstream::ok("ok").await;
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[edge]\nrate = \"1000/s\"\n\
         [store]\nbackend = \"redis\"\nurl = \"{}\"\nkey_prefix = \"contrib:\"\n\
         [[limits]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrates = [{{ limit = 1, per = \"1h\" }}]\n{}\
         limits = [\"per-ip\"]\n",
        redis.url(),
        one_route_config(&[upstream.url()], "")
    );
    let (gateway, _) = TestGateway::start_in_dir("contrib", &[], &config).await;
    assert_eq!(get(&gateway.url("/")).await.0.status(), 200);
    assert_eq!(get(&gateway.url("/")).await.0.status(), 429);
    gateway.reloader.reload().expect("the same config reloads");
    let (_, text) = scrape(gateway.admin_addr.unwrap(), None).await;
    exported_names(&text)
}

fn assert_all_exported(file: &str, expressions: &[String], exported: &BTreeSet<String>) {
    let selected: BTreeSet<String> = expressions.iter().flat_map(|e| selected_names(e)).collect();
    let missing: Vec<&String> = selected.difference(exported).collect();
    assert!(
        missing.is_empty(),
        "{file} selects {missing:?}, which /metrics does not export"
    );
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_select_is_exported() {
    let redis = RedisServer::start();
    let exported = exported_by_a_gateway(&redis).await;
    // The check can fail: a name the gateway does not export is found missing.
    let made_up = selected_names("sum(rate(rlp_made_up_total[5m])) / rlp_in_flight");
    assert_eq!(
        made_up.difference(&exported).collect::<Vec<_>>(),
        ["rlp_made_up_total"]
    );

    let dashboard: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).expect("JSON");
    assert_eq!(dashboard["uid"], "ratelimit-proxy");
    let expressions = dashboard_expressions(&dashboard);
    assert_all_exported(DASHBOARD, &expressions, &exported);
    let shown: BTreeSet<String> = expressions.iter().flat_map(|e| selected_names(e)).collect();
    for wanted in [
        "rlp_requests_total",
        "rlp_limit_decisions_total",
        "rlp_edge_decisions_total",
        "rlp_store_duration_seconds_bucket",
        "rlp_store_errors_total",
        "rlp_store_breaker_open",
        "rlp_upstream_healthy",
    ] {
        assert!(
            shown.contains(wanted),
            "the dashboard does not show {wanted}"
        );
    }

    let rules: RuleFile = serde_yaml::from_str(&read(ALERTS)).expect("a rule file");
    let alerts: Vec<&AlertingRule> = rules.groups.iter().flat_map(|g| &g.rules).collect();
    let expressions: Vec<String> = alerts.iter().map(|rule| rule.expr.clone()).collect();
    assert_all_exported(ALERTS, &expressions, &exported);
    for rule in &alerts {
        assert!(rule.labels.contains_key("severity"), "{}", rule.alert);
        assert!(rule.annotations.contains_key("summary"), "{}", rule.alert);
        if let Some(pending) = &rule.pending_for {
            ratelimit_proxy::testing::parse_duration(pending).expect("a duration");
        }
    }
    let alerted: BTreeSet<String> = expressions.iter().flat_map(|e| selected_names(e)).collect();
    for wanted in [
        "rlp_store_breaker_open",
        "rlp_store_errors_total",
        "rlp_upstream_healthy",
        "rlp_config_reloads_total",
    ] {
        assert!(alerted.contains(wanted), "no alert on {wanted}");
    }
    assert!(rules.groups.iter().all(|g| !g.name.is_empty()));
}
