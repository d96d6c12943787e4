use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::limit::Rate;

const NOW: Nanos = 1_000_000_000_000;

fn window(
    identity: u128,
    algorithm: Algorithm,
    limit: u64,
    per_secs: u64,
    group: usize,
) -> WindowRequest {
    WindowRequest {
        identity,
        limit_identity: identity,
        algorithm,
        rate: Rate {
            limit,
            per: Duration::from_secs(per_secs),
            burst: limit,
        },
        cost: 1,
        max_delay: Duration::ZERO,
        group,
        window: 0,
        shadow: false,
    }
}

fn allowed(checks: &[WindowCheck]) -> bool {
    checks.iter().all(WindowCheck::is_allow)
}

#[test]
fn sixty_four_tasks_on_one_key_admit_exactly_the_limit() {
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let store = Arc::new(MemoryStore::new(10_000));
        let request = window(42 << 64 | 7, algorithm, 100, 3600, 0);
        let admitted: usize = std::thread::scope(|scope| {
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (store, request) = (store.clone(), request.clone());
                    scope.spawn(move || {
                        (0..10)
                            .filter(|_| {
                                allowed(&store.check_all(std::slice::from_ref(&request), NOW))
                            })
                            .count()
                    })
                })
                .collect();
            tasks.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(admitted, 100, "{algorithm:?}");
    }
}

#[test]
fn a_denied_request_consumes_nothing_in_any_window_or_limit() {
    let store = MemoryStore::new(10_000);
    // Limit A: 5/min and 3/hour; limit B (another identity, other shard): 10/min.
    let a_minute = window(1, Algorithm::TokenBucket, 5, 60, 0);
    let a_hour = window(2, Algorithm::SlidingWindow, 3, 3600, 0);
    let b_minute = window(u128::MAX - 5, Algorithm::FixedWindow, 10, 60, 1);
    let all = [a_minute.clone(), a_hour.clone(), b_minute.clone()];
    for _ in 0..3 {
        assert!(allowed(&store.check_all(&all, NOW)));
    }
    // The hour window is spent: the request is denied, and neither A's minute nor B is charged.
    for _ in 0..20 {
        assert!(!allowed(&store.check_all(&all, NOW)));
    }
    let WindowCheck::Allow { remaining, .. } = store.check_all(&[a_minute], NOW)[0] else {
        panic!()
    };
    assert_eq!(remaining, 1, "5 − 3 admitted − this one");
    let WindowCheck::Allow { remaining, .. } = store.check_all(&[b_minute], NOW)[0] else {
        panic!()
    };
    assert_eq!(remaining, 6, "10 − 3 admitted − this one");
}

#[test]
fn shadow_groups_never_block_and_are_charged_only_when_they_allow() {
    let store = MemoryStore::new(10_000);
    let enforced = window(1, Algorithm::Gcra, 100, 60, 0);
    let mut shadow = window(2, Algorithm::Gcra, 2, 60, 1);
    shadow.shadow = true;
    let both = [enforced.clone(), shadow.clone()];
    let verdicts: Vec<bool> = (0..5)
        .map(|_| store.check_all(&both, NOW)[1].is_allow())
        .collect();
    assert_eq!(verdicts, [true, true, false, false, false]);
    let groups = groups_to_commit(&both, &[true, false]);
    assert_eq!(groups[..], [true, false]);
    let WindowCheck::Allow { remaining, .. } = store.check_all(&[enforced], NOW)[0] else {
        panic!()
    };
    assert_eq!(
        remaining, 94,
        "all five requests were admitted by the enforced limit"
    );
}

#[test]
fn cost_is_taken_from_every_window() {
    let store = MemoryStore::new(10_000);
    let mut heavy = window(9, Algorithm::TokenBucket, 10, 60, 0);
    heavy.cost = 4;
    assert!(allowed(&store.check_all(std::slice::from_ref(&heavy), NOW)));
    assert!(allowed(&store.check_all(std::slice::from_ref(&heavy), NOW)));
    assert!(!allowed(
        &store.check_all(std::slice::from_ref(&heavy), NOW)
    ));
    heavy.cost = 2;
    assert!(allowed(&store.check_all(&[heavy], NOW)));
}

#[test]
fn memory_is_bounded_expired_entries_go_and_live_ones_stay_limited() {
    let max_entries = SHARDS * 100;
    let store = MemoryStore::new(max_entries);
    let abuser = window(77 << 64 | 77, Algorithm::Gcra, 2, 60, 0);
    assert!(allowed(
        &store.check_all(std::slice::from_ref(&abuser), NOW)
    ));
    assert!(allowed(
        &store.check_all(std::slice::from_ref(&abuser), NOW)
    ));
    let mut rng = fastrand::Rng::with_seed(5);
    for i in 0..100_000u64 {
        let newcomer = window(rng.u128(..), Algorithm::Gcra, 2, 60, 0);
        store.check_all(&[newcomer], NOW + i);
    }
    assert!(
        store.entries() <= max_entries + SHARDS * OVERFLOW_CELLS as usize,
        "{}",
        store.entries()
    );
    assert!(
        !allowed(&store.check_all(std::slice::from_ref(&abuser), NOW + 100_000)),
        "the abuser got a fresh window"
    );
    // An hour later everything has expired and new identities get entries of their own again.
    let later = NOW + 3_600_000_000_000;
    let fresh = window(rng.u128(..), Algorithm::Gcra, 2, 60, 0);
    assert!(allowed(
        &store.check_all(std::slice::from_ref(&fresh), later)
    ));
    assert!(allowed(
        &store.check_all(std::slice::from_ref(&fresh), later)
    ));
    assert!(!allowed(&store.check_all(&[fresh], later)));
}

/// What `groups_to_commit` must answer, as it was first written: each group's verdict
/// spread over its windows, then none at all unless every enforced group allows.
fn groups_to_commit_model(requests: &[WindowRequest], allowed: &[bool]) -> Vec<bool> {
    let group_allows: Vec<bool> = (requests.iter())
        .map(|r| {
            let mut same = requests
                .iter()
                .zip(allowed)
                .filter(|(o, _)| o.group == r.group);
            same.all(|(_, allows)| *allows)
        })
        .collect();
    let enforced_allow = (requests.iter())
        .zip(&group_allows)
        .all(|(r, allows)| r.shadow || *allows);
    group_allows
        .iter()
        .map(|allows| enforced_allow && *allows)
        .collect()
}

proptest::proptest! {
    #[test]
    fn groups_are_committed_whole_and_only_when_every_enforced_group_allows(
        groups in proptest::collection::vec((1usize..4, proptest::bool::ANY), 0..5),
        allowed_bits in proptest::num::u16::ANY,
    ) {
        let mut requests = Vec::new();
        for (group, &(windows, shadow)) in groups.iter().enumerate() {
            for _ in 0..windows {
                let mut request = window(group as u128, Algorithm::Gcra, 10, 60, group);
                request.shadow = shadow;
                requests.push(request);
            }
        }
        let allowed: Vec<bool> = (0..requests.len()).map(|i| allowed_bits >> i & 1 == 1).collect();
        proptest::prop_assert_eq!(
            groups_to_commit(&requests, &allowed).to_vec(),
            groups_to_commit_model(&requests, &allowed)
        );
    }
}

#[test]
fn the_windows_of_one_identity_lock_one_shard() {
    let store = MemoryStore::new(1000);
    let limit_identity = 0xfeed_u128 << 100 | 7;
    let windows: Vec<WindowRequest> = (0..4)
        .map(|w| WindowRequest {
            identity: crate::limit::key::window_identity(limit_identity, w),
            limit_identity,
            window: w,
            ..window(limit_identity, Algorithm::Gcra, 5, 60, 0)
        })
        .collect();
    assert_eq!(store.lock_shards(&windows).guards.len(), 1);
    assert!(allowed(&store.check_all(&windows, NOW)));
}

#[test]
fn a_settled_reservation_counts_what_it_settled_at_for_every_algorithm() {
    use crate::limit::settle::{Adjustment, Reserved};
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
    ] {
        let store = MemoryStore::new(10_000);
        let mut request = window(9 << 64 | 3, algorithm, 10, 3600, 0);
        request.cost = 10;
        let checks = store.check_all(std::slice::from_ref(&request), NOW);
        let WindowCheck::Allow { reset, .. } = checks[0] else {
            panic!("{algorithm:?}: the reservation passes")
        };
        let reserved = [Reserved::at(NOW, reset)];
        let one = |store: &MemoryStore| {
            let probe = WindowRequest {
                cost: 1,
                ..request.clone()
            };
            allowed(&store.check_all(std::slice::from_ref(&probe), NOW))
        };
        assert!(!one(&store), "{algorithm:?}: the window is full");
        // Really cost 7: three come back.
        store.settle(
            std::slice::from_ref(&request),
            &reserved,
            Adjustment::Refund(3),
            NOW,
        );
        assert_eq!((0..5).filter(|_| one(&store)).count(), 3, "{algorithm:?}");
        // A debt of 4 more: the identity is refused, and stays refused once the entry would
        // have expired without the debt.
        store.settle(
            std::slice::from_ref(&request),
            &reserved,
            Adjustment::Debt(4),
            NOW,
        );
        assert!(!one(&store), "{algorithm:?}: in debt");
        assert_eq!(store.entries(), 1, "{algorithm:?}");
    }
}
