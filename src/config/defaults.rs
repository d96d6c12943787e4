//! The values in force that a file left out, added to what `/config` shows: an operator asking
//! "what is the idle timeout here?" should not need docs/configuration.md's defaults tables.
//! Only absent keys are filled (what the file says stays as written), from the validated `Config`.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Config;
use super::rates::format_per;
use crate::limit::key::Missing;
use crate::limit::rules::{Consistency, OnError, Tier, Window};
use crate::request::canonical::{EscapedSlashes, Underscores};
use crate::request::client_fields::REMOVED_BY_DEFAULT;
use crate::request::client_ip::ForwardHeader;

/// Fills the absent keys of `document` (the file as JSON) with `config`'s values.
pub(super) fn fill(document: &mut Value, config: &Config) {
    let Some(top) = document.as_object_mut() else {
        return;
    };
    server(section(top, "server"), config);
    client_ip(section(top, "client_ip"), config);
    store(section(top, "store"), config);
    log(section(top, "log"), config);
    let response = section(top, "response");
    let mut headers = Vec::new();
    headers.extend(config.response.x_ratelimit.then_some("x-ratelimit"));
    headers.extend(config.response.ietf.then_some("ietf"));
    put(response, "headers", json!(headers));
    put(
        response,
        "problem_type",
        json!(&*config.response.problem_type),
    );
    if let Some((_, ttl)) = config
        .plans
        .as_ref()
        .and_then(|plans| plans.redis_hash.as_ref())
    {
        put(section(top, "plans"), "redis_ttl", duration(*ttl));
    }
    if let Some(edge) = &config.edge {
        let raw = section(top, "edge");
        put(raw, "burst", json!(edge.rate.burst));
        put(raw, "max_tracked", json!(edge.max_tracked));
    }
    each(top, "limits", config.limits.len(), |i, raw| {
        limit(raw, config, i)
    });
    each(top, "routes", config.routes.len(), |i, raw| {
        let route = &config.routes[i];
        put(raw, "cost", json!(route.cost));
        put(raw, "case_sensitive", json!(route.case_sensitive));
        put(raw, "upgrades", json!(route.upgrades));
    });
    each(top, "upstreams", config.upstreams.len(), |i, raw| {
        let upstream = &config.upstreams[i];
        let balance = match upstream.balance {
            super::Balance::RoundRobin => "round_robin",
            super::Balance::LeastRequests => "least_requests",
        };
        put(raw, "balance", json!(balance));
        put(raw, "connect_timeout", duration(upstream.connect_timeout));
        put(raw, "response_timeout", duration(upstream.response_timeout));
        put(raw, "read_timeout", duration(upstream.read_timeout));
        put(raw, "reuse_after_body", json!(upstream.reuse_after_body));
        put(raw, "ejection_time", duration(upstream.ejection_time));
    });
}

fn server(raw: &mut Map<String, Value>, config: &Config) {
    let server = &config.server;
    let listen: Vec<String> = server.listen.iter().map(ToString::to_string).collect();
    put(raw, "listen", json!(listen));
    for (key, value) in [
        ("header_read_timeout", server.header_read_timeout),
        ("idle_timeout", server.idle_timeout),
        ("body_read_timeout", server.body_read_timeout),
        ("send_timeout", server.send_timeout),
        ("tunnel_idle_timeout", server.tunnel_idle_timeout),
        ("tunnel_send_timeout", server.tunnel_send_timeout),
        ("shutdown_grace", server.shutdown_grace),
    ] {
        put(raw, key, duration(value));
    }
    put(raw, "max_connections", json!(server.max_connections));
    put(raw, "max_header_bytes", json!(server.max_header_bytes));
    put(raw, "workers", json!(server.workers));
    let underscores = match server.underscores {
        Underscores::Drop => "drop",
        Underscores::Allow => "allow",
        Underscores::Reject => "reject",
    };
    put(raw, "underscores_in_headers", json!(underscores));
    let escaped = match server.escaped_slashes {
        EscapedSlashes::Keep => "keep",
        EscapedSlashes::Reject => "reject",
    };
    put(raw, "escaped_slashes", json!(escaped));
    put(raw, "allow_trace", json!(server.allow_trace));
}

fn client_ip(raw: &mut Map<String, Value>, config: &Config) {
    let header = match config.client_ip.header {
        ForwardHeader::XForwardedFor => "x-forwarded-for",
        ForwardHeader::Forwarded => "forwarded",
        ForwardHeader::XRealIp => "x-real-ip",
    };
    put(raw, "header", json!(header));
    put(raw, "ipv6_prefix", json!(config.client_ip.ipv6_prefix));
    put(raw, "trusted_proxies", json!([]));
    // Only when the file left it out, so the list in force is then the default one.
    put(raw, "remove_fields", json!(REMOVED_BY_DEFAULT));
    let writes = config.client_fields.writes;
    put(raw, "set_x_real_ip", json!(writes.x_real_ip));
    put(raw, "set_forwarded", json!(writes.forwarded));
}

fn store(raw: &mut Map<String, Value>, config: &Config) {
    let store = &config.store;
    let backend = match &store.redis {
        None => "memory",
        Some(redis) if redis.cluster => "redis-cluster",
        Some(_) => "redis",
    };
    put(raw, "backend", json!(backend));
    put(raw, "max_entries", json!(store.max_entries));
    put(raw, "on_error", json!(on_error(store.on_error)));
    if let Some(redis) = &store.redis {
        put(raw, "timeout", duration(redis.timeout));
        put(raw, "connect_timeout", duration(redis.connect_timeout));
        put(raw, "key_prefix", json!(redis.key_prefix));
        put(raw, "fallback_instances", json!(store.fallback_instances));
        put(
            raw,
            "ready_requires_redis",
            json!(store.ready_requires_redis),
        );
    }
}

fn log(raw: &mut Map<String, Value>, config: &Config) {
    let log = &config.log;
    put(raw, "format", json!(if log.json { "json" } else { "text" }));
    put(raw, "access", json!(log.access));
    let denied = match log.denied {
        super::DeniedLines::All => "all".to_string(),
        super::DeniedLines::Skip => "none".to_string(),
        super::DeniedLines::OneIn(n) => format!("1/{n}"),
    };
    put(raw, "denied", json!(denied));
}

fn limit(raw: &mut Map<String, Value>, config: &Config, index: usize) {
    let rule = &config.limits[index];
    let missing = match rule.missing {
        Missing::Ip => "ip",
        Missing::Skip => "skip",
        Missing::Deny => "deny",
    };
    put(raw, "missing", json!(missing));
    put(raw, "algorithm", json!(rule.algorithm.name()));
    put(raw, "shadow", json!(rule.shadow));
    let delays = !rule.max_delay.is_zero();
    put(
        raw,
        "action",
        json!(if delays { "delay" } else { "reject" }),
    );
    if delays {
        put(raw, "max_delay", duration(rule.max_delay));
    }
    put(raw, "on_error", json!(on_error(rule.on_error)));
    match rule.consistency {
        Consistency::Exact => put(raw, "consistency", json!("exact")),
        Consistency::Approximate { sync_interval } => {
            put(raw, "consistency", json!("approximate"));
            put(raw, "sync_interval", duration(sync_interval));
        }
    }
    fill_bursts(raw.get_mut("rates"), &rule.windows);
    if let Some(tiers) = raw.get_mut("tiers").and_then(Value::as_object_mut) {
        for (name, rates) in tiers.iter_mut() {
            if let Some(Tier::Windows(windows)) = rule.tiers.get(name) {
                fill_bursts(Some(rates), windows);
            }
        }
    }
}

/// Each rate of `rates` (as written) with the burst in force of its window.
fn fill_bursts(rates: Option<&mut Value>, windows: &[Window]) {
    let Some(rates) = rates.and_then(Value::as_array_mut) else {
        return;
    };
    for (rate, window) in rates.iter_mut().zip(windows) {
        if let Some(rate) = rate.as_object_mut() {
            put(rate, "burst", json!(window.rate.burst));
        }
    }
}

fn on_error(on_error: OnError) -> &'static str {
    match on_error {
        OnError::Allow => "allow",
        OnError::Deny => "deny",
        OnError::Local => "local",
    }
}

fn duration(value: Duration) -> Value {
    json!(format_per(value))
}

/// The object at `key`, made when absent.
#[expect(clippy::expect_used, reason = "the value is made an object just above")]
fn section<'a>(top: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let value = top.entry(key).or_insert_with(|| json!({}));
    if !value.is_object() {
        *value = json!({});
    }
    value.as_object_mut().expect("made an object just above")
}

/// Calls `fill` with each object of the array at `key` (the config has `len` of them).
fn each(
    top: &mut Map<String, Value>,
    key: &str,
    len: usize,
    mut fill: impl FnMut(usize, &mut Map<String, Value>),
) {
    let Some(items) = top.get_mut(key).and_then(Value::as_array_mut) else {
        return;
    };
    for (i, item) in items.iter_mut().enumerate().take(len) {
        if let Some(object) = item.as_object_mut() {
            fill(i, object);
        }
    }
}

fn put(object: &mut Map<String, Value>, key: &str, value: Value) {
    object.entry(key).or_insert(value);
}

#[cfg(test)]
mod tests {
    #[test]
    fn config_shows_the_defaults_in_force_beside_what_the_file_says() {
        let text = r#"
[server]
listen = ["127.0.0.1:0"]
idle_timeout = "90s"
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
limits = ["per-key"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{ limit = 100, per = "1m" }]
tiers = { pro = [{ limit = 1000, per = "1m" }] }
"#;
        let config = super::super::parse_str(text, "gw.toml").unwrap();
        let shown = &config.document["config"];
        assert_eq!(shown["server"]["idle_timeout"], "90s", "as written");
        assert_eq!(shown["server"]["header_read_timeout"], "10s");
        assert_eq!(shown["server"]["max_connections"], 20000);
        assert_eq!(shown["server"]["underscores_in_headers"], "drop");
        assert_eq!(shown["client_ip"]["header"], "x-forwarded-for");
        assert_eq!(shown["client_ip"]["ipv6_prefix"], 64);
        assert_eq!(shown["client_ip"]["remove_fields"][0], "forwarded");
        assert_eq!(shown["client_ip"]["set_forwarded"], false);
        assert_eq!(shown["store"]["backend"], "memory");
        assert_eq!(shown["store"]["on_error"], "local");
        assert_eq!(shown["log"]["denied"], "all");
        assert_eq!(
            shown["response"]["headers"],
            serde_json::json!(["x-ratelimit", "ietf"])
        );
        let limit = &shown["limits"][0];
        assert_eq!(limit["algorithm"], "token_bucket");
        assert_eq!(limit["consistency"], "exact");
        assert_eq!(limit["missing"], "ip");
        assert_eq!(limit["action"], "reject");
        assert_eq!(limit["rates"][0]["burst"], 100);
        assert_eq!(limit["tiers"]["pro"][0]["burst"], 1000);
        assert_eq!(shown["routes"][0]["cost"], 1);
        assert_eq!(shown["upstreams"][0]["balance"], "round_robin");
        assert_eq!(shown["upstreams"][0]["connect_timeout"], "2s");
    }

    #[test]
    fn config_shows_the_plans_cache_time_in_force() {
        let text = r#"
[server]
listen = ["127.0.0.1:0"]
[store]
backend = "redis"
url = "redis://127.0.0.1:6379"
[[upstreams]]
name = "api"
servers = ["http://127.0.0.1:9001"]
[[routes]]
name = "default"
upstream = "api"
limits = ["per-key"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{ limit = 100, per = "1m" }]
tiers = { pro = [{ limit = 1000, per = "1m" }] }
[plans]
key = "header:x-api-key"
redis_hash = "tiers"
"#;
        let config = super::super::parse_str(text, "gw.toml").unwrap();
        assert_eq!(config.document["config"]["plans"]["redis_ttl"], "10s");
    }

    #[test]
    fn config_shows_an_approximate_limits_sync_interval_in_force() {
        let text = r#"
[server]
listen = ["127.0.0.1:0"]
[store]
backend = "redis"
url = "redis://127.0.0.1:6379"
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
algorithm = "fixed_window"
rates = [{ limit = 100000, per = "1m" }]
consistency = "approximate"
"#;
        let config = super::super::parse_str(text, "gw.toml").unwrap();
        let limit = &config.document["config"]["limits"][0];
        assert_eq!(limit["consistency"], "approximate");
        assert_eq!(limit["sync_interval"], "100ms");
    }
}
