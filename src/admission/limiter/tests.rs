//! The limiter over a scripted shared store: what each `on_error` does when the store times
//! out or its breaker is open, a cluster whose node holding one identity is down, the
//! standing denials that spare the store a call, and the local fallback's share.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method};

use super::{Evaluated, LimitDecision, Limiter, Stores};
use crate::admission::shared::SharedStore;
use crate::admission::shared::scripted::{Answer, ScriptedStore};
use crate::http1::request_fields::RequestFields;
use crate::limit::key::RequestFacts;
use crate::limit::rules::OnError;
use crate::request::route::RouteLimits;
use crate::rt::clock::ManualClock;
use crate::store::error::StoreError;
use crate::store::memory::MemoryStore;

const TIMEOUT: StoreError = StoreError::Timeout(Duration::from_millis(50));

/// A limiter with `limits` (TOML `[[limits]]` tables) over `store`; every route applies all
/// of them.
fn limiter(limits: &str, store: &Arc<ScriptedStore>, fallback_instances: u64) -> Limiter {
    let text = format!(
        "[[upstreams]]\nname = \"u\"\nservers = [\"http://127.0.0.1:1\"]\n\
         [[routes]]\nname = \"r\"\npath_prefix = \"/\"\nupstream = \"u\"\n{limits}"
    );
    let config = crate::config::parse_str(&text, "test").expect("a valid config");
    let stores = Stores {
        memory: Arc::new(MemoryStore::new(10_000)),
        shared: Some(SharedStore::Scripted(store.clone())),
        fallback_instances,
        leases: None,
    };
    Limiter::new(config.limits.clone(), None, Some("secret"), stores)
}

fn every_limit(limiter: &Limiter) -> RouteLimits {
    RouteLimits {
        rules: (0..limiter.rules.len()).collect(),
        cost: 1,
    }
}

/// One request with `x-api-key: key`.
async fn ask(limiter: &Limiter, key: &str, clock: &ManualClock) -> Evaluated {
    let mut fields = HeaderMap::new();
    fields.insert(
        "x-api-key",
        HeaderValue::from_str(key).expect("a field value"),
    );
    let fields = RequestFields::Map(fields);
    let ip: IpAddr = "192.0.2.1".parse().expect("an address");
    let facts = RequestFacts {
        client_ip: ip,
        route: "r",
        method: &Method::GET,
        host: None,
        path: "/",
        path_in_any_case: false,
        query: None,
        fields: &fields,
    };
    let route = every_limit(limiter);
    use crate::rt::clock::Clock;
    limiter.evaluate(&route, &facts, ip, clock.now()).await
}

fn limit(name: &str, on_error: &str, limit: u64) -> String {
    format!(
        "[[limits]]\nname = \"{name}\"\nkey = [\"header:x-api-key\"]\n\
         rates = [{{ limit = {limit}, per = \"1m\" }}]\non_error = \"{on_error}\"\n"
    )
}

fn scripted(clock: &ManualClock) -> Arc<ScriptedStore> {
    Arc::new(ScriptedStore::new(clock.clone()))
}

fn is_allowed(evaluated: &Evaluated) -> bool {
    matches!(evaluated.decision, LimitDecision::Allow { .. })
}

#[tokio::test]
async fn a_healthy_store_decides_and_its_denial_then_stands_without_a_call() {
    let clock = ManualClock::new();
    let store = scripted(&clock);
    let limiter = limiter(&limit("per-key", "deny", 2), &store, 1);
    assert!(is_allowed(&ask(&limiter, "a", &clock).await));
    assert!(is_allowed(&ask(&limiter, "a", &clock).await));
    let denied = ask(&limiter, "a", &clock).await;
    let LimitDecision::Deny { retry_after, .. } = denied.decision else {
        panic!("the third request is over the limit: {:?}", denied.decision);
    };
    assert!(retry_after > Duration::ZERO);
    assert_eq!(store.calls(), 3);
    // The denial stands until its retry time: answered in process.
    let again = ask(&limiter, "a", &clock).await;
    assert!(matches!(again.decision, LimitDecision::Deny { .. }));
    assert_eq!(store.calls(), 3, "a standing denial asks the store nothing");
    // Another key is not held back by it.
    assert!(is_allowed(&ask(&limiter, "b", &clock).await));
    assert_eq!(store.calls(), 4);
}

#[tokio::test]
async fn on_error_allow_drops_the_limit_and_says_so() {
    let clock = ManualClock::new();
    let store = scripted(&clock);
    store.answer_always(Answer::Down(TIMEOUT));
    let limiter = limiter(&limit("per-key", "allow", 1), &store, 1);
    for _ in 0..5 {
        let evaluated = ask(&limiter, "a", &clock).await;
        assert_eq!(evaluated.store_error, Some(TIMEOUT));
        let LimitDecision::Allow {
            degraded, statuses, ..
        } = evaluated.decision
        else {
            panic!("allowed while the store is down: {:?}", evaluated.decision);
        };
        assert_eq!(degraded.as_slice(), [(0, OnError::Allow)]);
        assert!(statuses.is_empty(), "no window was checked");
    }
}

#[tokio::test]
async fn on_error_deny_refuses_until_the_breaker_lets_a_probe_through() {
    let clock = ManualClock::new();
    let store = scripted(&clock);
    let limiter = limiter(&limit("per-key", "deny", 100), &store, 1);
    let open = StoreError::BreakerOpen {
        retry_in: Duration::from_millis(700),
    };
    store.answer_next(Answer::Down(open.clone()));
    let evaluated = ask(&limiter, "a", &clock).await;
    assert_eq!(evaluated.store_error, Some(open));
    assert_eq!(
        evaluated.decision,
        LimitDecision::Unavailable {
            limit: Arc::from("per-key"),
            retry_after: Duration::from_millis(700),
        },
        "the client waits for the breaker's probe"
    );
    // Any other failure: told to come back when the breaker would have let a probe through.
    store.answer_next(Answer::Down(TIMEOUT));
    let evaluated = ask(&limiter, "a", &clock).await;
    assert!(matches!(
        evaluated.decision,
        LimitDecision::Unavailable { retry_after, .. } if retry_after == TIMEOUT.retry_in()
    ));
    // Healthy again: decided by the store.
    assert!(is_allowed(&ask(&limiter, "a", &clock).await));
}

#[tokio::test]
async fn on_error_local_enforces_the_gateways_share_in_process() {
    let clock = ManualClock::new();
    let store = scripted(&clock);
    store.answer_always(Answer::Down(TIMEOUT));
    // A limit of 10 over 2 gateways: 5 each while the store is down.
    let limiter = limiter(&limit("per-key", "local", 10), &store, 2);
    let mut allowed = 0;
    for _ in 0..10 {
        let evaluated = ask(&limiter, "a", &clock).await;
        assert_eq!(evaluated.store_error, Some(TIMEOUT));
        match evaluated.decision {
            LimitDecision::Allow { degraded, .. } => {
                assert_eq!(degraded.as_slice(), [(0, OnError::Local)]);
                allowed += 1;
            }
            LimitDecision::Deny { .. } => {}
            other => panic!("the local fallback decides: {other:?}"),
        }
    }
    assert_eq!(allowed, 5);
    // The local share's window passes as the limit's does.
    clock.advance(Duration::from_secs(61));
    assert!(is_allowed(&ask(&limiter, "a", &clock).await));
}

#[tokio::test]
async fn a_cluster_node_down_degrades_only_the_limits_it_holds() {
    let clock = ManualClock::new();
    let store = scripted(&clock);
    let limits = format!(
        "{}{}",
        limit("reached", "deny", 2),
        limit("on-the-failed-node", "allow", 1)
    );
    let limiter = limiter(&limits, &store, 1);
    assert!(is_allowed(&ask(&limiter, "a", &clock).await));
    // The node that holds the second limit's identity for "a" goes down.
    let failed_node = ask_one(&limiter, 1, &clock).await;
    store.answer_always(Answer::DownFor(vec![failed_node], TIMEOUT));
    // Over the second limit, but its node cannot say: dropped (allow); the first still counts.
    let evaluated = ask(&limiter, "a", &clock).await;
    assert_eq!(evaluated.store_error, Some(TIMEOUT));
    let LimitDecision::Allow {
        degraded, applied, ..
    } = evaluated.decision
    else {
        panic!("allowed: {:?}", evaluated.decision);
    };
    assert_eq!(
        applied.as_slice(),
        [0],
        "only the reached limit was checked"
    );
    assert_eq!(degraded.as_slice(), [(1, OnError::Allow)]);
    // The reached limit is spent now: it denies, whatever the failed node's limit says.
    let evaluated = ask(&limiter, "a", &clock).await;
    assert!(
        matches!(&evaluated.decision, LimitDecision::Deny { limit, .. } if &**limit == "reached"),
        "{:?}",
        evaluated.decision
    );
}

/// The identity limit `rule` gives key "a": the one its denial reports, once it is spent.
async fn ask_one(limiter: &Limiter, rule: usize, clock: &ManualClock) -> u128 {
    let only = Limiter::new(
        vec![limiter.rules[rule].clone()],
        None,
        Some("secret"),
        Stores {
            memory: Arc::new(MemoryStore::new(100)),
            shared: None,
            fallback_instances: 1,
            leases: None,
        },
    );
    loop {
        if let LimitDecision::Deny { identity, .. } = ask(&only, "a", clock).await.decision {
            return identity;
        }
    }
}

#[tokio::test]
async fn a_shadow_limit_never_falls_back() {
    let clock = ManualClock::new();
    let store = scripted(&clock);
    store.answer_always(Answer::Down(TIMEOUT));
    let shadow = limit("watching", "deny", 1).replace("on_error", "shadow = true\non_error");
    let limiter = limiter(&shadow, &store, 1);
    let evaluated = ask(&limiter, "a", &clock).await;
    let LimitDecision::Allow {
        degraded,
        shadow_denied,
        ..
    } = evaluated.decision
    else {
        panic!("a shadow limit never refuses: {:?}", evaluated.decision);
    };
    assert!(degraded.is_empty() && shadow_denied.is_empty());
}
