use std::sync::Arc;
use std::time::Duration;

use super::scripted::{ScriptedStore, Settled};
use super::*;
use crate::limit::{Algorithm, Rate};
use crate::rt::clock::{Clock, ManualClock};
use crate::store::denied::Denied;

const IDENTITY: u128 = 42;

fn store() -> (SharedStore, Arc<ScriptedStore>, ManualClock) {
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1_000));
    let scripted = Arc::new(ScriptedStore::new(clock.clone()));
    (SharedStore::Scripted(scripted.clone()), scripted, clock)
}

fn window() -> WindowRequest {
    WindowRequest {
        identity: IDENTITY,
        limit_identity: IDENTITY,
        algorithm: Algorithm::FixedWindow,
        rate: Rate {
            limit: 2,
            per: Duration::from_secs(3600),
            burst: 2,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group: 0,
        window: 0,
        shadow: false,
    }
}

fn just_now() -> ElapsedReservation {
    ElapsedReservation {
        since_sent: Duration::from_millis(2),
        since_reply: Duration::from_millis(1),
        reset: Duration::from_secs(60),
    }
}

fn remember_denial(shared: &SharedStore, now: u64) {
    let denial = Denied {
        limit: Arc::from("logins"),
        retry_after: Duration::from_secs(60),
        statuses: Small::new(),
    };
    shared.denied().remember(IDENTITY, 1, &denial, now);
}

/// The limit's two units reserved, a denial standing; a refund of one gives it back in the
/// counts and forgets the denial, and the call is recorded as asked.
#[tokio::test]
async fn a_refund_is_recorded_applied_and_forgets_the_standing_denial() {
    let (shared, scripted, clock) = store();
    let requests = [window()];
    for _ in 0..2 {
        assert!(
            shared
                .check_all(&requests, &["logins"])
                .await
                .error
                .is_none()
        );
    }
    remember_denial(&shared, clock.now());
    clock.advance(Duration::from_millis(5));
    let refund = Adjustment::Refund(1);
    (shared
        .settle(&requests, &["logins"], &[just_now()], refund)
        .await)
        .unwrap();
    assert!(shared.denied().lookup(IDENTITY, 1, clock.now()).is_none());
    let peeked = shared.peek(&requests, &["logins"]).await.unwrap();
    assert!(
        matches!(peeked[..], [WindowCheck::Allow { remaining: 0, .. }]),
        "{peeked:?}"
    );
    assert_eq!(
        scripted.settled(),
        [Settled {
            identities: vec![IDENTITY],
            reserved: vec![just_now()],
            adjustment: refund,
        }]
    );
}

/// A debt leaves a standing denial standing, and so does a refund that failed.
#[tokio::test]
async fn a_debt_or_a_failed_refund_keeps_the_standing_denial() {
    let (shared, scripted, clock) = store();
    let requests = [window()];
    remember_denial(&shared, clock.now());
    (shared
        .settle(&requests, &["logins"], &[just_now()], Adjustment::Debt(3))
        .await)
        .unwrap();
    assert!(shared.denied().lookup(IDENTITY, 1, clock.now()).is_some());
    let down = StoreError::Timeout(Duration::from_millis(50));
    scripted.settle_fails(Some(down.clone()));
    let refund = Adjustment::Refund(1);
    let failed = shared
        .settle(&requests, &["logins"], &[just_now()], refund)
        .await;
    assert_eq!(failed, Err(down));
    assert!(shared.denied().lookup(IDENTITY, 1, clock.now()).is_some());
    assert_eq!(scripted.settled().len(), 2, "the failed one recorded too");
    let peeked = shared.peek(&requests, &["logins"]).await.unwrap();
    assert!(
        matches!(peeked[..], [WindowCheck::Deny { .. }]),
        "the debt counted: {peeked:?}"
    );
}
