use super::*;
use crate::admission::edge::EdgeVerdict;
use std::time::Duration;

#[test]
fn answers_are_counted_by_route_and_code_in_the_family_series() {
    let metrics = Metrics::new();
    let api = metrics.route("api");
    let upstream = metrics.upstream("backend");
    for code in [200, 200, 429, 999] {
        metrics.observe_request(Some(&api), code, Duration::from_millis(1));
        metrics.observe_upstream(&upstream, code, Duration::from_millis(1));
    }
    metrics.observe_request(None, 404, Duration::from_millis(1));
    let text = metrics.encode();
    for line in [
        r#"rlp_requests_total{route="api",code="200"} 2"#,
        r#"rlp_requests_total{route="api",code="429"} 1"#,
        r#"rlp_requests_total{route="api",code="999"} 1"#,
        r#"rlp_requests_total{route="",code="404"} 1"#,
        r#"rlp_upstream_requests_total{upstream="backend",code="200"} 2"#,
        r#"rlp_upstream_requests_total{upstream="backend",code="999"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    // A second runtime's handles (after a reload) count into the same series.
    metrics.observe_request(Some(&metrics.route("api")), 200, Duration::ZERO);
    assert!(
        metrics
            .encode()
            .contains(r#"rlp_requests_total{route="api",code="200"} 3"#)
    );
}

#[test]
fn edge_decisions_are_counted_by_label_and_appear_once_counted() {
    let metrics = Metrics::new();
    let allowed = || EdgeVerdict::Allow;
    let forbidden = || EdgeVerdict::Forbidden {
        list: "blocked".into(),
    };
    for verdict in [allowed(), allowed(), forbidden(), EdgeVerdict::Exempt] {
        metrics.count_edge(EdgeDecision::of(&verdict));
    }
    let text = metrics.encode();
    for line in [
        r#"rlp_edge_decisions_total{decision="allowed"} 2"#,
        r#"rlp_edge_decisions_total{decision="forbidden"} 1"#,
        r#"rlp_edge_decisions_total{decision="exempt"} 1"#,
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains(r#"decision="denied""#), "{text}");
}

#[test]
fn names_with_quotes_backslashes_or_newlines_are_escaped_in_label_values() {
    let metrics = Metrics::new();
    let route = metrics.route("say \"hi\"\\now\nplease");
    metrics.observe_request(Some(&route), 200, Duration::ZERO);
    metrics.limit_counters("per\"key").allowed.inc();
    let text = metrics.encode();
    assert!(
        text.contains(r#"rlp_requests_total{route="say \"hi\"\\now\nplease",code="200"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"rlp_limit_decisions_total{limit="per\"key",decision="allowed"} 1"#),
        "{text}"
    );
    // Every sample line stays one line with its label block closed.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains("} ") || !line.contains('{'), "{line}");
    }
}
