//! The limits that settle by their answer (`charge`): `rlp_limit_units_total{limit,kind}`
//! (units reserved at admission, the units answers settled at, units refunded, units charged
//! as a debt beyond the reservation) and `rlp_limit_settles_total{limit,outcome}` (what became
//! of each reservation).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::LabelText;

/// What became of one reservation: settled at a value, or why it stands as reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettleOutcome {
    /// Settled at the value the answer reported (equal to the reservation included).
    Settled,
    /// Given back whole: a `refund` answer, or a status `statuses` does not list.
    GivenBack,
    /// Kept as reserved by the charge's own rule (a status `statuses` lists, an answer the
    /// gateway made for a limit that settles by usage).
    Kept,
    /// The usage header or field is not in the answer.
    Missing,
    /// The usage is not a non-negative integer within 64 bits (or a header is repeated).
    Invalid,
    /// The body is over the scan's caps.
    TooLarge,
    /// The body is not well-formed JSON.
    Malformed,
    /// The body did not end whole: the client went away, or the upstream broke off.
    Incomplete,
    /// The body cannot be read for usage: not JSON or an event stream, or content-coded.
    Unscannable,
    /// The store could not be reached to settle, within the retries.
    StoreFailed,
}

impl SettleOutcome {
    const ALL: [SettleOutcome; 10] = [
        SettleOutcome::Settled,
        SettleOutcome::GivenBack,
        SettleOutcome::Kept,
        SettleOutcome::Missing,
        SettleOutcome::Invalid,
        SettleOutcome::TooLarge,
        SettleOutcome::Malformed,
        SettleOutcome::Incomplete,
        SettleOutcome::Unscannable,
        SettleOutcome::StoreFailed,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            SettleOutcome::Settled => "settled",
            SettleOutcome::GivenBack => "given_back",
            SettleOutcome::Kept => "kept",
            SettleOutcome::Missing => "missing",
            SettleOutcome::Invalid => "invalid",
            SettleOutcome::TooLarge => "too_large",
            SettleOutcome::Malformed => "malformed",
            SettleOutcome::Incomplete => "incomplete",
            SettleOutcome::Unscannable => "unscannable",
            SettleOutcome::StoreFailed => "store_failed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitKind {
    limit: LabelText,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitOutcome {
    limit: LabelText,
    outcome: &'static str,
}

/// The two families, registered once for the gateway's life.
#[derive(Clone, Default)]
pub(crate) struct SettleFamilies {
    units: Family<LimitKind, Counter>,
    settles: Family<LimitOutcome, Counter>,
}

/// One limit's counters, fetched once per runtime; every series starts at 0.
#[derive(Clone)]
pub(crate) struct SettleCounters {
    pub reserved: Counter,
    pub settled: Counter,
    pub refunded: Counter,
    pub debt: Counter,
    outcomes: [Counter; SettleOutcome::ALL.len()],
}

impl SettleCounters {
    pub(crate) fn ended(&self, outcome: SettleOutcome) {
        self.outcomes[outcome as usize].inc();
    }
}

impl SettleFamilies {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "rlp_limit_units",
            "Units of limits with a charge: reserved at admission, settled at by answers, \
             refunded, and charged as debt beyond a reservation",
            self.units.clone(),
        );
        registry.register(
            "rlp_limit_settles",
            "Reservations of limits with a charge, by what became of them",
            self.settles.clone(),
        );
    }

    /// The counters of the limit named `limit`.
    pub(crate) fn of(&self, limit: &str) -> SettleCounters {
        let unit = |kind| {
            let labels = LimitKind {
                limit: LabelText::from(limit),
                kind,
            };
            self.units.get_or_create(&labels).clone()
        };
        let outcome = |outcome: SettleOutcome| {
            let labels = LimitOutcome {
                limit: LabelText::from(limit),
                outcome: outcome.label(),
            };
            self.settles.get_or_create(&labels).clone()
        };
        SettleCounters {
            reserved: unit("reserved"),
            settled: unit("settled"),
            refunded: unit("refunded"),
            debt: unit("debt"),
            outcomes: SettleOutcome::ALL.map(outcome),
        }
    }
}
