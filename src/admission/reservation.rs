//! What admission reserved for the limits that settle by their answer (`charge`): per limit,
//! the windows as checked, each window's reset as its check gave it, and where they were
//! counted. An admitted request carries them to its answer, which settles them.

use std::time::{Duration, Instant};

use crate::limit::WindowCheck;
use crate::limit::window::{Small, WindowRequest};
use crate::rt::clock::Nanos;

/// One limit's reservation for one request.
#[derive(Debug, Clone)]
pub(crate) struct Reservation {
    /// The limit's index into `Limiter::rules`.
    pub rule: usize,
    /// Units reserved in each window: the limit's `reserve`, else the route's cost.
    pub units: u64,
    /// The windows as they were checked (a local fallback's with its divided rate).
    pub windows: Small<WindowRequest>,
    /// Each window's reset right after the reservation.
    pub resets: Small<Duration>,
    pub place: Place,
}

/// Where a reservation was counted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place {
    /// This process's memory store, at the store's `at`.
    Memory { at: Nanos },
    /// The shared store, by a call sent and answered at these instants: the reservation was
    /// made between them, on the store's clock.
    Shared { sent: Instant, replied: Instant },
}

/// The reservations of the limits among `requests` that have a charge (`charged(group)`) and
/// were committed: every window of the group allowed. `place` says where a group's first
/// window was counted.
pub(crate) fn committed(
    requests: &[WindowRequest],
    checks: &[WindowCheck],
    charged: impl Fn(usize) -> bool,
    place: impl Fn(usize) -> Place,
) -> Vec<Reservation> {
    let mut reservations = Vec::new();
    let mut start = 0;
    while start < requests.len() {
        let group = requests[start].group;
        let end = (start..requests.len())
            .find(|&i| requests[i].group != group)
            .unwrap_or(requests.len());
        let resets: Option<Small<Duration>> = checks[start..end]
            .iter()
            .map(|check| match check {
                WindowCheck::Allow { reset, .. } => Some(*reset),
                WindowCheck::Deny { .. } => None,
            })
            .collect();
        if let Some(resets) = resets.filter(|_| charged(group)) {
            reservations.push(Reservation {
                rule: group,
                units: requests[start].cost,
                windows: Small::from(&requests[start..end]),
                resets,
                place: place(start),
            });
        }
        start = end;
    }
    reservations
}
