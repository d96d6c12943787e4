use super::*;

/// An upstream `api` of plain-HTTP servers at `authorities` (`host:port`).
pub(crate) fn config(authorities: &[String], balance: Balance) -> UpstreamConfig {
    UpstreamConfig {
        name: "api".into(),
        servers: authorities
            .iter()
            .map(|authority| UpstreamServer {
                scheme: http::uri::Scheme::HTTP,
                authority: authority.parse().unwrap(),
            })
            .collect(),
        balance,
        connect_timeout: Duration::from_secs(1),
        response_timeout: Duration::from_secs(1),
        read_timeout: Duration::from_secs(1),
        reuse_after_body: true,
        ejection_time: Duration::from_secs(60),
        health_check: None,
        tls: Default::default(),
    }
}

fn pool(servers: usize, balance: Balance) -> UpstreamPool {
    let authorities: Vec<_> = (0..servers)
        .map(|i| format!("127.0.0.1:{}", 9000 + i))
        .collect();
    UpstreamPool::new(&config(&authorities, balance), Default::default(), 1).unwrap()
}

fn check() -> HealthCheck {
    HealthCheck {
        path: "/".into(),
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
        healthy_threshold: 2,
        unhealthy_threshold: 3,
    }
}

#[tokio::test]
async fn round_robin_visits_every_server_in_turn() {
    let pool = pool(3, Balance::RoundRobin);
    let picks: Vec<_> = (0..6).map(|_| pool.pick(None).unwrap()).collect();
    assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
}

#[tokio::test]
async fn ejected_and_excluded_servers_are_skipped() {
    let pool = pool(3, Balance::RoundRobin);
    pool.eject(1);
    assert!((0..10).all(|_| pool.pick(None) != Some(1)));
    assert!((0..10).all(|_| pool.pick(Some(0)) == Some(2)));
    pool.eject(0);
    pool.eject(2);
    assert_eq!(pool.pick(None), None);
}

#[tokio::test]
async fn an_ejected_server_takes_traffic_again_after_the_ejection_time() {
    let authorities = ["127.0.0.1:9000".to_string()];
    let config = UpstreamConfig {
        ejection_time: Duration::from_millis(500),
        ..config(&authorities, Balance::RoundRobin)
    };
    let pool = UpstreamPool::new(&config, Default::default(), 1).unwrap();
    assert_eq!(pool.pick(None), Some(0));
    pool.eject(0);
    assert_eq!(pool.pick(None), None);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(pool.pick(None), Some(0));
}

#[tokio::test]
async fn least_requests_prefers_the_idle_server() {
    let pool = pool(2, Balance::LeastRequests);
    let _busy = pool.begin(0);
    assert!((0..10).all(|_| pool.pick(None) == Some(1)));
    drop(_busy);
    let picks: Vec<_> = (0..4).map(|_| pool.pick(None).unwrap()).collect();
    assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
}

#[tokio::test]
async fn checks_need_a_streak_to_change_the_verdict() {
    let pool = pool(1, Balance::RoundRobin);
    let check = check();
    assert_eq!(pool.record_check(0, false, &check), None);
    assert_eq!(pool.record_check(0, true, &check), None); // streak broken
    assert_eq!(pool.record_check(0, false, &check), None);
    assert_eq!(pool.record_check(0, false, &check), None);
    assert_eq!(pool.record_check(0, false, &check), Some(false));
    assert_eq!(pool.pick(None), None);
    assert_eq!(pool.record_check(0, true, &check), None);
    assert_eq!(pool.record_check(0, true, &check), Some(true));
    assert_eq!(pool.pick(None), Some(0));
}

/// A pool under `before` with its second server ejected, and the pool a reload to `after` makes
/// from it.
fn reloaded(before: &UpstreamConfig, after: UpstreamConfig) -> (UpstreamPool, UpstreamPool) {
    let old = UpstreamPool::new(before, Default::default(), 1).unwrap();
    old.eject(1);
    let new = UpstreamPool::succeeding(&after, Default::default(), 1, Some(&old)).unwrap();
    (old, new)
}

fn authorities(ports: &[u16]) -> Vec<String> {
    ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
}

#[tokio::test]
async fn a_reload_keeps_what_is_known_of_unchanged_servers_wherever_they_moved() {
    let before = config(&authorities(&[9000, 9001]), Balance::RoundRobin);
    let after = config(&authorities(&[9002, 9000, 9001]), Balance::RoundRobin);
    let (old, new) = reloaded(&before, after);
    assert!(
        !new.is_available_now(2),
        "9001 was ejected before the reload"
    );
    assert!(new.is_available_now(0) && new.is_available_now(1));
    // One record, shared: what the old pool learns from here on counts in the new one.
    for _ in 0..3 {
        old.record_check(0, false, &check());
    }
    assert!(!new.is_available_now(1));
}

#[tokio::test]
async fn a_server_whose_health_terms_changed_starts_afresh() {
    let before = config(&authorities(&[9000, 9001]), Balance::RoundRobin);
    let changes: [fn(&mut UpstreamConfig); 3] = [
        |c| c.health_check = Some(check()),
        |c| c.ejection_time = Duration::from_secs(5),
        |c| c.connect_timeout = Duration::from_secs(5),
    ];
    for (case, change) in changes.iter().enumerate() {
        let mut after = before.clone();
        change(&mut after);
        let (_, new) = reloaded(&before, after);
        assert!(new.is_available_now(1), "change {case}");
    }
    // Only the upstream's own terms count: balance is not one of them.
    let after = config(&authorities(&[9000, 9001]), Balance::LeastRequests);
    assert!(!reloaded(&before, after).1.is_available_now(1));
}

#[tokio::test]
async fn a_carried_ejection_ends_when_it_was_due() {
    let before = UpstreamConfig {
        ejection_time: Duration::from_millis(400),
        ..config(&authorities(&[9000, 9001]), Balance::RoundRobin)
    };
    let (_, new) = reloaded(&before, before.clone());
    assert!(!new.is_available_now(1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(new.is_available_now(1));
}
