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
