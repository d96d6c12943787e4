//! Hot-path micro-benchmarks: `cargo bench --bench hot_path`.

use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::FutureExt;
use http::{HeaderMap, HeaderValue};
use ratelimit_proxy::testing::IpSet;
use ratelimit_proxy::testing::RequestFields;
use ratelimit_proxy::testing::RouteLimits;
use ratelimit_proxy::testing::{Algorithm, Rate};
use ratelimit_proxy::testing::{ClientIpPolicy, ForwardHeader};
use ratelimit_proxy::testing::{Clock, SystemClock};
use ratelimit_proxy::testing::{EdgeLayer, EdgePolicy};
use ratelimit_proxy::testing::{KeyPart, Missing, RequestFacts};
use ratelimit_proxy::testing::{LimitRule, OnError, Window};
use ratelimit_proxy::testing::{Limiter, Stores};

fn random_v4_blocks(count: usize, seed: u64) -> Vec<ipnet::IpNet> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..count)
        .map(|_| {
            let len = rng.u8(16..=32);
            ipnet::IpNet::V4(
                ipnet::Ipv4Net::new(rng.u32(..).into(), len)
                    .unwrap()
                    .trunc(),
            )
        })
        .collect()
}

fn edge_policy(deny_list: bool) -> EdgePolicy {
    let deny = Arc::new(IpSet::new(random_v4_blocks(1000, 1)));
    EdgePolicy {
        // High enough that every check is allowed: this measures the common path.
        rate: Rate {
            limit: 1_000_000_000,
            per: Duration::from_secs(1),
            burst: 1_000_000_000,
        },
        max_tracked: 1_000_000,
        deny: if deny_list {
            vec![("blocked".into(), deny)]
        } else {
            Vec::new()
        },
        overrides: Vec::new(),
    }
}

/// The pipeline reads the clock once per request for every layer and passes `now` in, so
/// these benches advance time themselves instead of reading the clock.
fn edge_check(c: &mut Criterion) {
    let known: IpAddr = "198.51.100.7".parse().unwrap();
    let cases = [
        ("edge check, known IP, 1000-CIDR deny list", true),
        ("edge check, known IP, no lists", false),
    ];
    for (name, deny_list) in cases {
        let edge = EdgeLayer::new(edge_policy(deny_list));
        let mut now = SystemClock::new().now();
        for i in 0..100_000u32 {
            let ip = IpAddr::from(i.to_be_bytes());
            edge.check(ip, ip, now);
        }
        c.bench_function(name, |b| {
            b.iter(|| {
                now += 1_000;
                edge.check(black_box(known), known, now)
            })
        });
    }
}

fn header_walk(c: &mut Criterion) {
    let policy = ClientIpPolicy {
        trusted_proxies: IpSet::new(["10.0.0.0/8".parse().unwrap()]),
        header: ForwardHeader::XForwardedFor,
        ipv6_prefix: 64,
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-forwarded-for",
        HeaderValue::from_static("198.51.100.1, 10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4"),
    );
    let headers = RequestFields::Map(headers);
    let peer: IpAddr = "10.0.0.5".parse().unwrap();
    c.bench_function("client ip, X-Forwarded-For with 5 hops", |b| {
        b.iter(|| policy.resolve(black_box(peer), black_box(&headers)))
    });
}

fn list_lookup(c: &mut Criterion) {
    let set = IpSet::new(random_v4_blocks(100_000, 2));
    let mut rng = fastrand::Rng::with_seed(3);
    let probes: Vec<IpAddr> = (0..1024)
        .map(|_| IpAddr::from(rng.u32(..).to_be_bytes()))
        .collect();
    let mut i = 0;
    c.bench_function("ip list lookup, 100k CIDRs", |b| {
        b.iter(|| {
            i = (i + 1) % probes.len();
            set.contains(black_box(probes[i]))
        })
    });
}

fn limits_decision(c: &mut Criterion) {
    let wide = |limit| Rate {
        limit,
        per: Duration::from_secs(60),
        burst: limit,
    };
    let window = |rate: Rate, name: &str| Window::new(rate, name);
    let rule = |name: &str, key: Vec<KeyPart>, algorithm| LimitRule {
        name: Arc::from(name),
        key,
        missing: Missing::Ip,
        algorithm,
        // Limits that are never reached: this measures the common, allowed path.
        windows: vec![
            window(wide(u32::MAX as u64), "a"),
            window(wide(u32::MAX as u64), "b"),
        ],
        tiers: Default::default(),
        shadow: false,
        max_delay: Duration::ZERO,
        exempt_lists: Vec::new(),
        on_error: OnError::Allow,
        consistency: Default::default(),
        charge: None,
    };
    let rules = vec![
        rule(
            "per-key",
            vec![KeyPart::parse("header:x-api-key").unwrap()],
            Algorithm::TokenBucket,
        ),
        rule(
            "per-ip",
            vec![KeyPart::Ip, KeyPart::Route],
            Algorithm::SlidingWindow,
        ),
    ];
    let stores = Stores {
        memory: Arc::new(ratelimit_proxy::testing::MemoryStore::new(4_000_000)),
        shared: None,
        fallback_instances: 1,
        leases: None,
    };
    let limiter = Limiter::new(rules, None, Some("secret"), stores);
    let route = RouteLimits {
        rules: vec![0, 1],
        cost: 1,
    };
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", HeaderValue::from_static("k-0123456789abcdef"));
    let headers = RequestFields::Map(headers);
    let ip: IpAddr = "198.51.100.7".parse().unwrap();
    let facts = RequestFacts {
        client_ip: ip,
        route: "default",
        method: &http::Method::GET,
        host: Some(b"api.example.com"),
        path: "/v1/things",
        path_in_any_case: false,
        query: None,
        fields: &headers,
    };
    let clock = SystemClock::new();
    let mut now = clock.now();
    c.bench_function("limits decision, 2 limits x 2 windows, memory store", |b| {
        b.iter(|| {
            now += 1_000;
            // The memory store never waits: the future is ready at its first poll.
            limiter
                .evaluate(&route, black_box(&facts), ip, now)
                .now_or_never()
                .expect("the memory store answers at once")
        })
    });
}

/// The canonical request step's parsers: a typical API path (already canonical: the fast path
/// with no allocation), one that needs decoding and dot removal, and a Host.
fn canonical_form(c: &mut Criterion) {
    use ratelimit_proxy::testing::{host, path};
    let keep = path::EscapedSlashes::Keep;
    for target in ["/v1/users/12345/orders", "/api/v2/search/items-by-tag"] {
        c.bench_function(&format!("normalize canonical path {target}"), |b| {
            b.iter(|| path::normalize(black_box(target), keep))
        });
    }
    let spelled = "/v1//users/./12345/../12345/%6Frders";
    c.bench_function("normalize path needing work", |b| {
        b.iter(|| path::normalize(black_box(spelled), keep))
    });
    c.bench_function("canonical host api.example.com:8080", |b| {
        b.iter(|| host::canonical(black_box(b"api.example.com:8080")).map(|h| h.name_len))
    });
}

criterion_group!(
    benches,
    canonical_form,
    edge_check,
    header_walk,
    list_lookup,
    limits_decision
);
criterion_main!(benches);
