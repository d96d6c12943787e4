//! Memory per stored identity and per tracked edge IP: `cargo bench --bench memory`.
//! Counts the bytes the tables allocate (not timing), so the numbers are exact and repeatable.

use std::net::IpAddr;
use std::time::Duration;

use ratelimit_proxy::testing::MemoryStore;
use ratelimit_proxy::testing::WindowRequest;
use ratelimit_proxy::testing::{Algorithm, Rate};
use ratelimit_proxy::testing::{EdgeLayer, EdgePolicy};

const NOW: u64 = 1_000_000_000_000;

fn store_bytes_per_identity(identities: u64, windows: u64) -> f64 {
    let store = MemoryStore::new(4 * identities as usize);
    let mut rng = fastrand::Rng::with_seed(1);
    for _ in 0..identities {
        let identity = rng.u128(..);
        let requests: Vec<WindowRequest> = (0..windows)
            .map(|w| WindowRequest {
                identity: identity ^ u128::from(w),
                limit_identity: 0,
                algorithm: Algorithm::TokenBucket,
                rate: Rate {
                    limit: 100,
                    per: Duration::from_secs(60),
                    burst: 100,
                },
                cost: 1,
                max_delay: Duration::ZERO,
                group: 0,
                window: w as usize,
                shadow: false,
            })
            .collect();
        store.check_all(&requests, NOW);
    }
    store.memory_bytes() as f64 / identities as f64
}

fn edge_bytes_per_ip(ips: u32) -> f64 {
    let edge = EdgeLayer::new(EdgePolicy {
        rate: Rate {
            limit: 100,
            per: Duration::from_secs(1),
            burst: 100,
        },
        max_tracked: 2 * ips as usize,
        deny: Vec::new(),
        overrides: Vec::new(),
    });
    for i in 0..ips {
        let ip = IpAddr::from((0x0A00_0000 + i).to_be_bytes());
        edge.check(ip, ip, NOW);
    }
    edge.memory_bytes() as f64 / edge.tracked() as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let million = 1_000_000;
    println!(
        "memory store, 1 window per identity:  {:.0} bytes per identity ({million} identities)",
        store_bytes_per_identity(million, 1)
    );
    println!(
        "memory store, 2 windows per identity: {:.0} bytes per identity ({million} identities)",
        store_bytes_per_identity(million, 2)
    );
    println!(
        "edge layer: {:.0} bytes per tracked IP ({million} IPs)",
        edge_bytes_per_ip(million as u32)
    );
}
