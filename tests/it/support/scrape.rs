//! Scraping a gateway's `/metrics` and reading it with a real Prometheus text parser
//! (prometheus-parse), for the exposition tests and the contrib files' names.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use http::Request;
use prometheus_parse::{LineInfo, SampleType, Scrape};

use super::{empty, send};

/// `/metrics` of the admin listener at `admin`, asked with `accept`: its content type and text.
pub async fn scrape(admin: SocketAddr, accept: Option<&str>) -> (String, String) {
    let mut request = Request::get(format!("http://{admin}/metrics"));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let (response, body) = send(request.body(empty()).unwrap()).await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    let text = String::from_utf8(body.to_vec()).expect("UTF-8 metrics");
    (content_type.to_string(), text)
}

/// The classic text parsed by prometheus-parse.
pub fn parse_classic(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|line| Ok(line.to_string()))).expect("a parsable scrape")
}

/// Every `# TYPE` of a classic text, by the name it declares (a histogram by its base name, as
/// PromQL names it too).
pub fn declared_types(text: &str) -> BTreeMap<String, SampleType> {
    text.lines()
        .filter_map(|line| match LineInfo::parse(line) {
            LineInfo::Type {
                metric_name,
                metric_alias,
                sample_type,
            } => Some((metric_alias.unwrap_or(metric_name), sample_type)),
            _ => None,
        })
        .collect()
}

/// The names a PromQL query may select from a classic text: every declared family (with or
/// without series yet), a histogram's `_bucket`, `_sum` and `_count`, and every sample's name.
pub fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (name, sample_type) in declared_types(text) {
        if sample_type == SampleType::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
        names.insert(name);
    }
    names.extend(parse_classic(text).samples.into_iter().map(|s| s.metric));
    names
}
