use super::*;
use crate::config::{Balance, UpstreamConfig};
use crate::upstream::background::close_expired_until;
use crate::upstream::pool::UpstreamPool;
use crate::upstream::pool::tests::config;
use http_body_util::{BodyExt, Either, Empty};
use tokio_util::sync::CancellationToken;

async fn pool_for_echo() -> UpstreamPool {
    let address = crate::cli::echo::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let config = config(&[address.to_string()], Balance::RoundRobin);
    UpstreamPool::new(&config, Default::default(), 2).unwrap()
}

async fn exchange(pool: &UpstreamPool) {
    let head = UpstreamHead::get("/");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let request = (head, Either::Right(Empty::new()));
    let response = pool
        .send(0, request, SetFields::default(), deadline, true)
        .await;
    let body = response.unwrap().into_body().collect().await.unwrap();
    assert!(!body.to_bytes().is_empty());
}

/// One exchange, whose connection is pooled as its body ends.
async fn one_pooled_connection(pool: &UpstreamPool) {
    exchange(pool).await;
    assert_eq!(pool.connections.idle_count(0), 1);
}

#[tokio::test]
async fn idle_connections_close_after_the_idle_timeout_and_not_before() {
    let pool = pool_for_echo().await;
    one_pooled_connection(&pool).await;
    let pooled_at = Instant::now();
    pool.connections.close_expired(pooled_at + IDLE_TIMEOUT / 2);
    assert_eq!(pool.connections.idle_count(0), 1);
    pool.connections
        .close_expired(pooled_at + IDLE_TIMEOUT + Duration::from_secs(1));
    assert_eq!(pool.connections.idle_count(0), 0);
    // The next request simply opens a new connection.
    exchange(&pool).await;
}

#[tokio::test]
async fn the_background_sweep_closes_idle_connections_when_no_request_comes() {
    let pool = Arc::new(pool_for_echo().await);
    one_pooled_connection(&pool).await;
    tokio::time::pause();
    let stop = CancellationToken::new();
    tokio::spawn(close_expired_until(vec![pool.clone()], stop.clone()));
    let sweeps_after = |ticks: u32| async move {
        for _ in 0..ticks {
            tokio::time::advance(IDLE_TIMEOUT / 4).await;
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
    };
    sweeps_after(3).await; // 67.5 s idle
    assert_eq!(pool.connections.idle_count(0), 1);
    sweeps_after(2).await; // 112.5 s idle
    assert_eq!(pool.connections.idle_count(0), 0);
    stop.cancel();
}

#[tokio::test]
async fn a_reloaded_pool_goes_on_with_the_idle_connections_of_unchanged_servers() {
    let address = crate::cli::echo::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let before = config(&[address.to_string()], Balance::RoundRobin);
    let old = UpstreamPool::new(&before, Default::default(), 2).unwrap();
    one_pooled_connection(&old).await;
    let new = UpstreamPool::succeeding(&before, Default::default(), 2, Some(&old)).unwrap();
    assert_eq!(new.connections.idle_count(0), 1);
    // Connections carry the read timeout they were made with: a new one means new connections.
    let after = UpstreamConfig {
        read_timeout: Duration::from_secs(7),
        reuse_after_body: true,
        ..before.clone()
    };
    let changed = UpstreamPool::succeeding(&after, Default::default(), 2, Some(&new)).unwrap();
    assert_eq!(changed.connections.idle_count(0), 0);
    exchange(&new).await;
    assert_eq!(
        new.connections.idle_count(0),
        1,
        "the carried connection was reused"
    );
}
