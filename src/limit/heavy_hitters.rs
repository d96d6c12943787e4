//! The most-denied identities of the last few minutes, for /debug/limited: a space-saving
//! sketch (bounded: at most `CAPACITY` counters; a newcomer replaces the smallest and inherits
//! its count, so heavy hitters are never missed) in two rotating generations of `PERIOD`.
//! Identities are the keyed hashes, never raw keys.

use std::sync::{Arc, Mutex};

use crate::rt::clock::Nanos;

const CAPACITY: usize = 64;
const PERIOD_NS: u64 = 5 * 60 * 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hitter {
    pub limit: Arc<str>,
    pub identity: u128,
    pub denied: u64,
}

#[derive(Default)]
struct Generations {
    current: Vec<Hitter>,
    previous: Vec<Hitter>,
    started: Nanos,
}

#[derive(Default)]
pub(crate) struct HeavyHitters {
    generations: Mutex<Generations>,
}

impl HeavyHitters {
    pub(crate) fn record(&self, limit: &Arc<str>, identity: u128, now: Nanos) {
        let mut generations = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        if now.saturating_sub(generations.started) >= PERIOD_NS {
            generations.previous = std::mem::take(&mut generations.current);
            generations.started = now;
        }
        let current = &mut generations.current;
        if let Some(hitter) = current
            .iter_mut()
            .find(|h| h.identity == identity && h.limit == *limit)
        {
            hitter.denied += 1;
        } else if current.len() < CAPACITY {
            current.push(Hitter {
                limit: limit.clone(),
                identity,
                denied: 1,
            });
        } else if let Some(smallest) = current.iter_mut().min_by_key(|h| h.denied) {
            *smallest = Hitter {
                limit: limit.clone(),
                identity,
                denied: smallest.denied + 1,
            };
        }
    }

    /// The last two periods merged, most denied first.
    pub(crate) fn top(&self) -> Vec<Hitter> {
        let generations = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        let mut merged: Vec<Hitter> = generations.current.clone();
        for old in &generations.previous {
            match merged
                .iter_mut()
                .find(|h| h.identity == old.identity && h.limit == old.limit)
            {
                Some(hitter) => hitter.denied += old.denied,
                None => merged.push(old.clone()),
            }
        }
        merged.sort_by_key(|h| std::cmp::Reverse(h.denied));
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heaviest_stays_on_top_within_bounded_memory() {
        let hitters = HeavyHitters::default();
        let limit: Arc<str> = Arc::from("per-key");
        for round in 0..50u64 {
            hitters.record(&limit, 7, round);
            for other in 0..20u128 {
                hitters.record(&limit, 1000 + u128::from(round) * 100 + other, round);
            }
        }
        let top = hitters.top();
        assert!(top.len() <= CAPACITY);
        assert_eq!((top[0].identity, top[0].denied), (7, 50));
    }

    #[test]
    fn old_periods_fall_away() {
        let hitters = HeavyHitters::default();
        let limit: Arc<str> = Arc::from("l");
        hitters.record(&limit, 1, 0);
        hitters.record(&limit, 2, PERIOD_NS);
        assert_eq!(hitters.top().len(), 2);
        hitters.record(&limit, 3, 2 * PERIOD_NS);
        let mut identities: Vec<u128> = hitters.top().iter().map(|h| h.identity).collect();
        identities.sort_unstable();
        assert_eq!(identities, [2, 3]);
    }
}
