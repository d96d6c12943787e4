//! Hot-path micro-benchmarks: `cargo bench --bench hot_path`.

use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue};
use ratelimit_proxy::client_ip::{ClientIpPolicy, ForwardHeader};
use ratelimit_proxy::clock::{Clock, SystemClock};
use ratelimit_proxy::edge::{EdgeLayer, EdgePolicy};
use ratelimit_proxy::ip_set::IpSet;
use ratelimit_proxy::limit::Rate;

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

fn edge_check(c: &mut Criterion) {
    let policy = EdgePolicy {
        // High enough that every check is allowed: this measures the common path.
        rate: Rate {
            limit: 1_000_000_000,
            per: Duration::from_secs(1),
            burst: 1_000_000_000,
        },
        max_tracked: 1_000_000,
        deny: vec![(
            "blocked".into(),
            Arc::new(IpSet::new(random_v4_blocks(1000, 1))),
        )],
        overrides: Vec::new(),
    };
    let edge = EdgeLayer::new(policy);
    let clock = SystemClock::new();
    let known: IpAddr = "198.51.100.7".parse().unwrap();
    for i in 0..100_000u32 {
        edge.check(IpAddr::from(i.to_be_bytes()), clock.now());
    }
    edge.check(known, clock.now());
    c.bench_function("edge check, known IP", |b| {
        b.iter(|| edge.check(black_box(known), clock.now()))
    });
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

criterion_group!(benches, edge_check, header_walk, list_lookup);
criterion_main!(benches);
