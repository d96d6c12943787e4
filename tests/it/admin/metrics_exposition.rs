//! `/metrics` in both text formats: the classic Prometheus text by default, read by a real
//! parser with every sample typed as declared (counters as counters), and OpenMetrics to a
//! scraper that prefers it; `rlp_build_info` and the process metrics in both.

use crate::support;

use std::collections::BTreeMap;

use http::StatusCode;
use prometheus_parse::{SampleType, Value};
use support::scrape::{declared_types, parse_classic, scrape};
use support::*;

const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// What Prometheus 2 sends by default: OpenMetrics preferred.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

async fn gateway() -> (TestGateway, TestUpstream) {
    let upstream = TestUpstream::ok("ok").await;
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n[edge]\nrate = \"1000/s\"\n\
         [[limits]]\nname = \"per-ip\"\nkey = [\"ip\"]\nrates = [{{ limit = 1, per = \"1h\" }}]\n{}\
         limits = [\"per-ip\"]\n",
        one_route_config(&[upstream.url()], "")
    );
    let gateway = TestGateway::start(&config).await;
    // One answer of each kind, so that the families have series.
    assert_eq!(get(&gateway.url("/")).await.0.status(), StatusCode::OK);
    let refused = get(&gateway.url("/")).await.0.status();
    assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
    (gateway, upstream)
}

/// The value of the one sample named `metric` whose labels include `labels`.
fn sample<'s>(
    scrape: &'s prometheus_parse::Scrape,
    metric: &str,
    labels: &[(&str, &str)],
) -> &'s Value {
    let matching: Vec<_> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(matching.len(), 1, "{metric} {labels:?}: {matching:?}");
    &matching[0].value
}

#[tokio::test]
async fn the_classic_text_is_the_default_and_types_every_sample_as_declared() {
    let (gateway, _upstream) = gateway().await;
    let admin = gateway.admin_addr.unwrap();
    for accept in [None, Some("text/plain;version=0.0.4"), Some("*/*")] {
        let (content_type, text) = scrape(admin, accept).await;
        assert_eq!(content_type, CLASSIC, "{accept:?}");
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        let types = declared_types(&text);
        let scrape = parse_classic(&text);
        for s in &scrape.samples {
            let declared = match &s.value {
                Value::Counter(_) => SampleType::Counter,
                Value::Gauge(_) => SampleType::Gauge,
                Value::Histogram(_) => SampleType::Histogram,
                Value::Summary(_) => SampleType::Summary,
                // prometheus-parse keys a histogram by its `_bucket` series and leaves its
                // `_sum` and `_count` untyped; nothing else may be.
                Value::Untyped(_) => {
                    let base = s
                        .metric
                        .strip_suffix("_sum")
                        .or(s.metric.strip_suffix("_count"));
                    assert_eq!(
                        base.and_then(|b| types.get(b)),
                        Some(&SampleType::Histogram),
                        "{} untyped in:\n{text}",
                        s.metric
                    );
                    continue;
                }
            };
            assert_eq!(types.get(&s.metric), Some(&declared), "{}", s.metric);
        }
        let counted = |route_code: [(&str, &str); 2]| {
            sample(&scrape, "rlp_requests_total", &route_code).clone()
        };
        assert_eq!(
            counted([("route", "default"), ("code", "200")]),
            Value::Counter(1.0)
        );
        assert_eq!(
            counted([("route", "default"), ("code", "429")]),
            Value::Counter(1.0)
        );
        let denied = [("limit", "per-ip"), ("decision", "denied")];
        assert_eq!(
            sample(&scrape, "rlp_limit_decisions_total", &denied),
            &Value::Counter(1.0)
        );
        let kind = [("kind", "idle")];
        assert!(matches!(
            sample(&scrape, "rlp_timeouts_total", &kind),
            Value::Counter(_)
        ));
        assert!(matches!(
            sample(
                &scrape,
                "rlp_request_duration_seconds",
                &[("route", "default")]
            ),
            Value::Histogram(_)
        ));
        assert_build_and_process_metrics(&scrape, &types);
    }
}

fn assert_build_and_process_metrics(
    scrape: &prometheus_parse::Scrape,
    types: &BTreeMap<String, SampleType>,
) {
    let build = [
        ("version", env!("CARGO_PKG_VERSION")),
        ("commit", ratelimit_proxy::testing::COMMIT),
    ];
    assert_eq!(sample(scrape, "rlp_build_info", &build), &Value::Gauge(1.0));
    if !cfg!(target_os = "linux") {
        return;
    }
    assert!(
        matches!(sample(scrape, "process_cpu_seconds_total", &[]), Value::Counter(s) if *s >= 0.0)
    );
    for gauge in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert_eq!(types.get(gauge), Some(&SampleType::Gauge), "{gauge}");
        assert!(
            matches!(sample(scrape, gauge, &[]), Value::Gauge(v) if *v > 0.0),
            "{gauge}"
        );
    }
}

/// The commit in `rlp_build_info` is this checkout's HEAD (build.rs), or "unknown" without
/// `.git` (a source tarball), unless the build was given `RLP_GIT_COMMIT`.
#[test]
fn the_build_commit_is_the_checkouts_head() {
    let root = env!("CARGO_MANIFEST_DIR");
    let commit = ratelimit_proxy::testing::COMMIT;
    if let Ok(given) = std::env::var("RLP_GIT_COMMIT")
        && !given.trim().is_empty()
    {
        assert_eq!(commit, given.trim());
        return;
    }
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8(output.stdout).unwrap().trim().to_string());
    match head {
        Some(head) if std::path::Path::new(root).join(".git").exists() => assert_eq!(commit, head),
        _ => assert_eq!(commit, "unknown"),
    }
}

#[tokio::test]
async fn openmetrics_is_answered_to_a_scraper_that_prefers_it() {
    let (gateway, _upstream) = gateway().await;
    let admin = gateway.admin_addr.unwrap();
    for accept in ["application/openmetrics-text", PROMETHEUS_ACCEPT] {
        let (content_type, text) = scrape(admin, Some(accept)).await;
        assert_eq!(content_type, OPENMETRICS, "{accept}");
        assert_openmetrics_families(&text);
        for line in [
            "# TYPE rlp_requests counter",
            "# TYPE rlp_build_info gauge",
            r#"rlp_requests_total{route="default",code="429"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}

/// OpenMetrics' framing: `# EOF` last, and every sample in the family its `# TYPE` declared,
/// under a name its type allows (a counter's samples `_total`, never its bare name).
fn assert_openmetrics_families(text: &str) {
    assert_eq!(text.lines().last(), Some("# EOF"), "{text}");
    let mut family: Option<(&str, &str)> = None;
    for line in text.lines().filter(|l| *l != "# EOF") {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split_once(' ');
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
            continue;
        }
        let name = line.split(['{', ' ']).next().unwrap();
        let (base, kind) = family.unwrap_or_else(|| panic!("a sample before any TYPE: {line}"));
        let suffixes: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "gauge" => &[""],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            other => panic!("a {other} family in: {line}"),
        };
        assert!(
            suffixes.iter().any(|s| name.strip_suffix(s) == Some(base)),
            "{name} is not a sample of {kind} {base}"
        );
    }
}
