//! The reservations an answer's body settles: scanned for their usage as the body streams to
//! the client (the bytes are only looked at, never held), settled when it ends whole. A body
//! that does not end whole (the client went away, the upstream broke off) leaves them
//! standing: what was seen of a usage is not what the request cost.

use std::sync::Arc;

use super::{Settler, outcome_of};
use crate::admission::reservation::Reservation;
use crate::metrics::SettleOutcome;
use crate::response::body::BodyWatcher;
use crate::usage::UsageScanner;

pub(super) struct BodySettle {
    settler: Arc<Settler>,
    scans: Vec<(Reservation, UsageScanner)>,
    request_id: Box<str>,
}

impl BodySettle {
    pub(super) fn new(
        settler: Arc<Settler>,
        scans: Vec<(Reservation, UsageScanner)>,
        request_id: &str,
    ) -> BodySettle {
        BodySettle {
            settler,
            scans,
            request_id: request_id.into(),
        }
    }

    /// Settles every reservation by what its scan found, or leaves it standing as
    /// `incomplete` when the body did not end whole.
    fn settle_all(&mut self, whole: bool) {
        for (reservation, scan) in self.scans.drain(..) {
            let (units, outcome) = match whole.then(|| scan.finish()) {
                Some(Ok(units)) => (units, SettleOutcome::Settled),
                Some(Err(error)) => (reservation.units, outcome_of(error)),
                None => (reservation.units, SettleOutcome::Incomplete),
            };
            let settled = self.settler.settle(&reservation, units, outcome);
            if self.settler.log
                && let Some(charged) = self.settler.charged(&reservation)
            {
                tracing::info!(
                    target: "settle",
                    request_id = &*self.request_id,
                    limit = &*charged.name,
                    reserved = reservation.units,
                    settled,
                    outcome = outcome.label(),
                    "settle"
                );
            }
        }
    }
}

impl BodyWatcher for BodySettle {
    fn feed(&mut self, chunk: &[u8]) {
        for (_, scan) in &mut self.scans {
            scan.feed(chunk);
        }
    }

    fn ended(mut self: Box<Self>) {
        self.settle_all(true);
    }
}

impl Drop for BodySettle {
    fn drop(&mut self) {
        // Empty once `ended` settled them.
        self.settle_all(false);
    }
}
