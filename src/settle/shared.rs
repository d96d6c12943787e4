//! Settling a reservation made in the shared store (Redis): off the answer's path, in a task
//! of its own, retried while the call surely never reached Redis (an open breaker, a
//! connection that could not be made), then dropped and counted `store_failed`: the
//! reservation then stands as made. A call that may have run is never sent again: a settle
//! is not idempotent, and applying it twice would count twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::admission::shared::SharedStore;
use crate::limit::settle::Adjustment;
use crate::limit::window::{Small, WindowRequest};
use crate::metrics::{SettleCounters, SettleOutcome};
use crate::store::error::{ConnectionError, StoreError};
use crate::store::settle::ElapsedReservation;

/// How long after a failed attempt the next is made; then the settle is dropped.
const RETRY_AFTER: [Duration; 2] = [Duration::from_millis(100), Duration::from_secs(1)];

/// One settle for the shared store, with what to count once it is done.
pub(super) struct SharedSettle {
    pub shared: SharedStore,
    pub limit: Arc<str>,
    pub windows: Small<WindowRequest>,
    pub reserved: Small<ElapsedReservation>,
    pub adjustment: Adjustment,
    /// Reserved and settled units, and the outcome, counted once the store has it.
    pub units: (u64, u64),
    pub outcome: SettleOutcome,
    pub counters: SettleCounters,
}

impl SharedSettle {
    /// The reservation's windows as of `now`, for a check sent at `sent` and answered at
    /// `replied`.
    pub(super) fn elapsed(
        resets: &[Duration],
        sent: Instant,
        replied: Instant,
    ) -> Small<ElapsedReservation> {
        let now = Instant::now();
        (resets.iter())
            .map(|&reset| ElapsedReservation::between(sent, replied, reset, now))
            .collect()
    }

    /// Runs the settle in a task of its own; without a runtime to run it (the process is
    /// ending), it is dropped and counted.
    pub(super) fn spawn(self) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.run());
            }
            Err(_) => self.failed("no runtime left to send it"),
        }
    }

    async fn run(self) {
        let limits: Small<&str> = self.windows.iter().map(|_| &*self.limit).collect();
        let mut waits = RETRY_AFTER.iter();
        loop {
            let settled = (self.shared)
                .settle(&self.windows, &limits, &self.reserved, self.adjustment)
                .await;
            let error = match settled {
                Ok(()) => return self.counted(),
                Err(error) => error,
            };
            match waits.next() {
                Some(wait) if never_sent(&error) => tokio::time::sleep(*wait).await,
                _ => return self.failed(&error.to_string()),
            }
        }
    }

    fn counted(&self) {
        let (_, settled) = self.units;
        super::count(&self.counters, settled, Some(self.adjustment), self.outcome);
    }

    fn failed(&self, why: &str) {
        let (reserved, _) = self.units;
        super::count(&self.counters, reserved, None, SettleOutcome::StoreFailed);
        // Counted; at debug, as an outage would write a line per answer.
        tracing::debug!(
            limit = &*self.limit,
            error = why,
            "a settle could not reach the store: the reservation stands"
        );
    }
}

/// Whether the call failed before anything was written to Redis, so sending it again cannot
/// apply it twice.
fn never_sent(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::BreakerOpen { .. }
            | StoreError::Connection(
                ConnectionError::Connect { .. }
                    | ConnectionError::ConnectTimeout { .. }
                    | ConnectionError::Tls { .. }
                    | ConnectionError::Refused { .. }
            )
    )
}
