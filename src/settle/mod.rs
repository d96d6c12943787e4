//! Settling what admission reserved, once the answer says what a request really cost
//! (`[[limits]] charge`, docs/configuration.md "Limits that settle by their answer").
//!
//! At the answer's head each reservation is read by its limit's charge (`Charge::at_head`):
//! settled at once (a refund, a status, a usage header), or left to the body, which a
//! `BodySettle` watches as it streams to the client and settles when it ends whole. What an
//! answer cannot tell (no header, a body that is not JSON, one the client left before its end)
//! leaves the reservation standing: the request counts what it reserved.
//!
//! Settling never refuses or delays the request it settles; it changes what the identity's
//! later requests meet.

mod body;
mod shared;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use http::{HeaderName, Response};

use crate::admission::reservation::{Place, Reservation};
use crate::admission::shared::SharedStore;
use crate::limit::charge::{Answer, AtHead, Charge, SettleFrom};
use crate::limit::rules::LimitRule;
use crate::limit::settle::{Adjustment, Reserved};
use crate::limit::window::Small;
use crate::metrics::{SettleCounters, SettleFamilies, SettleOutcome};
use crate::response::ResponseBody;
use crate::rt::clock::Clock;
use crate::store::memory::MemoryStore;
use crate::usage::{self, BodyFormat, UsageError, UsageScanner};
use body::BodySettle;
use shared::SharedSettle;

/// The most units one answer is settled at: 2^53, what Redis counts exactly (a double), and
/// far beyond any window (a limit is at most 2^32 a window). Larger reports are settled at
/// this, so that no sum of them wraps a counter soon.
const MOST_UNITS: u64 = 1 << 53;

/// Settles reservations against the stores they were made in. One per runtime; a body still
/// streaming after a reload keeps the one it started with, whose stores the new runtime kept
/// where their settings did not change.
pub(crate) struct Settler {
    memory: Arc<MemoryStore>,
    /// Where reservations made in Redis are settled.
    shared: Option<SharedStore>,
    clock: Arc<dyn Clock>,
    /// By limit index, as `Reservation::rule`: None for a limit without a charge.
    limits: Box<[Option<Charged>]>,
    /// Whether body settles write their own log line (`[log] access`).
    log: bool,
}

struct Charged {
    name: Arc<str>,
    charge: Charge,
    counters: SettleCounters,
}

/// What an answer's head settled of its request's reservations, for the access line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SettledAtHead {
    /// Units reserved in all, over the request's limits with a charge.
    pub reserved: u64,
    /// Units they count now: None while some settle by the body, still streaming.
    pub settled: Option<u64>,
}

impl Settler {
    pub(crate) fn new(
        rules: &[LimitRule],
        (memory, shared): (Arc<MemoryStore>, Option<SharedStore>),
        clock: Arc<dyn Clock>,
        families: &SettleFamilies,
        log: bool,
    ) -> Settler {
        let charged = |rule: &LimitRule| {
            Some(Charged {
                name: rule.name.clone(),
                charge: rule.charge.clone()?,
                counters: families.of(&rule.name),
            })
        };
        Settler {
            memory,
            shared,
            clock,
            limits: rules.iter().map(charged).collect(),
            log,
        }
    }

    /// Counts what admission reserved.
    pub(crate) fn reserved(&self, reservations: &[Reservation]) {
        for reservation in reservations {
            if let Some(charged) = self.charged(reservation) {
                charged.counters.reserved.inc_by(reservation.units);
            }
        }
    }

    /// Whether a limit among `reservations` settles by the answer's body.
    pub(crate) fn reads_body(&self, reservations: &[Reservation]) -> bool {
        reservations.iter().any(|reservation| {
            self.charged(reservation)
                .is_some_and(|charged| matches!(charged.charge.settle, Some(SettleFrom::Body(_))))
        })
    }

    /// Settles what `answer`'s head tells, and has the body of `response` watched for the
    /// reservations its usage settles.
    pub(crate) fn at_head(
        self: &Arc<Self>,
        reservations: Vec<Reservation>,
        answer: Answer,
        response: &mut Response<ResponseBody>,
        request_id: &str,
    ) -> SettledAtHead {
        let mut summary = SettledAtHead {
            reserved: 0,
            settled: Some(0),
        };
        let mut scans = Vec::new();
        for reservation in reservations {
            let Some(charged) = self.charged(&reservation) else {
                continue;
            };
            summary.reserved += reservation.units;
            let counted = match charged.charge.at_head(answer, reservation.units) {
                AtHead::Settle(units) => {
                    self.settle(&reservation, units, settled_by_rule(&reservation, units))
                }
                AtHead::Header(name) => match header_usage(response, &name) {
                    Ok(units) => self.settle(&reservation, units, SettleOutcome::Settled),
                    Err(outcome) => self.stands(&reservation, outcome),
                },
                AtHead::Body(fields) => match body_format(response, answer) {
                    Ok(format) => {
                        scans.push((reservation, UsageScanner::new(&fields, format)));
                        continue;
                    }
                    Err(outcome) => self.stands(&reservation, outcome),
                },
            };
            summary.settled = summary.settled.map(|settled| settled + counted);
        }
        if !scans.is_empty() {
            summary.settled = None;
            let watcher = BodySettle::new(Arc::clone(self), scans, request_id);
            response.body_mut().watch(Box::new(watcher));
        }
        summary
    }

    fn charged(&self, reservation: &Reservation) -> Option<&Charged> {
        self.limits.get(reservation.rule)?.as_ref()
    }

    /// Settles `reservation` at `units`, counted as `outcome` (once the store has it, for the
    /// shared store); returns `units`.
    fn settle(&self, reservation: &Reservation, units: u64, outcome: SettleOutcome) -> u64 {
        let Some(charged) = self.charged(reservation) else {
            return units;
        };
        let units = units.min(MOST_UNITS);
        let adjustment = Adjustment::between(reservation.units, units);
        match (adjustment, reservation.place) {
            (None, _) => count(&charged.counters, units, None, outcome),
            (Some(adjustment), Place::Memory { at }) => {
                let reserved: Small<Reserved> = (reservation.resets.iter())
                    .map(|&reset| Reserved::at(at, reset))
                    .collect();
                let now = self.clock.now();
                self.memory
                    .settle(&reservation.windows, &reserved, adjustment, now);
                count(&charged.counters, units, Some(adjustment), outcome);
            }
            (Some(adjustment), Place::Shared { sent, replied }) => {
                let Some(shared) = &self.shared else {
                    return units;
                };
                SharedSettle {
                    shared: shared.clone(),
                    limit: charged.name.clone(),
                    windows: reservation.windows.clone(),
                    reserved: SharedSettle::elapsed(&reservation.resets, sent, replied),
                    adjustment,
                    units: (reservation.units, units),
                    outcome,
                    counters: charged.counters.clone(),
                }
                .spawn();
            }
        }
        units
    }

    /// Leaves `reservation` as it was made, counted as `outcome`; returns its units.
    fn stands(&self, reservation: &Reservation, outcome: SettleOutcome) -> u64 {
        self.settle(reservation, reservation.units, outcome)
    }
}

/// Counts a reservation that now counts `units`, adjusted by `adjustment`, as `outcome`.
fn count(
    counters: &SettleCounters,
    units: u64,
    adjustment: Option<Adjustment>,
    outcome: SettleOutcome,
) {
    counters.settled.inc_by(units);
    match adjustment {
        Some(Adjustment::Debt(debt)) => counters.debt.inc_by(debt),
        Some(Adjustment::Refund(refund)) => counters.refunded.inc_by(refund),
        None => 0,
    };
    counters.ended(outcome);
}

/// How a settle the charge decided at the head is counted: given back, kept, or settled.
fn settled_by_rule(reservation: &Reservation, units: u64) -> SettleOutcome {
    if units == reservation.units {
        SettleOutcome::Kept
    } else if units == 0 {
        SettleOutcome::GivenBack
    } else {
        SettleOutcome::Settled
    }
}

/// The usage an upstream answer reports in its header `name`. A header given twice is
/// invalid: which one an upstream meant cannot be known.
fn header_usage(
    response: &Response<ResponseBody>,
    name: &HeaderName,
) -> Result<u64, SettleOutcome> {
    let fields = response
        .body()
        .upstream_fields()
        .ok_or(SettleOutcome::Missing)?;
    // Framing, kept apart from the other fields (and checked when the head was read).
    if name == http::header::CONTENT_LENGTH {
        return fields.content_length().ok_or(SettleOutcome::Missing);
    }
    let name = name.as_str().as_bytes();
    let mut values = (fields.iter()).filter(|(field, _)| field.eq_ignore_ascii_case(name));
    let (_, value) = values.next().ok_or(SettleOutcome::Missing)?;
    if values.next().is_some() {
        return Err(SettleOutcome::Invalid);
    }
    usage::parse_header_value(value).map_err(outcome_of)
}

/// How the body of an upstream answer is scanned for usage, or why it cannot be: an answer
/// the gateway made, one with no body, a type other than JSON or an event stream, or a
/// content coding (the scanner reads the bytes as they go to the client).
fn body_format(
    response: &Response<ResponseBody>,
    answer: Answer,
) -> Result<BodyFormat, SettleOutcome> {
    let fields = response
        .body()
        .upstream_fields()
        .ok_or(SettleOutcome::Missing)?;
    if answer.status < 200 || answer.status == 204 || answer.status == 304 {
        return Err(SettleOutcome::Missing);
    }
    // A part of an answer (the gateway asks for it whole; an upstream may send one anyway).
    if answer.status == 206 {
        return Err(SettleOutcome::Unscannable);
    }
    let mut content_type = None;
    for (name, value) in fields.iter() {
        if name.eq_ignore_ascii_case(b"content-encoding") && !usage_readable_coding(value) {
            return Err(SettleOutcome::Unscannable);
        }
        if name.eq_ignore_ascii_case(b"content-type") {
            if content_type.is_some() {
                return Err(SettleOutcome::Unscannable);
            }
            content_type = Some(value);
        }
    }
    content_type
        .and_then(BodyFormat::of_content_type)
        .ok_or(SettleOutcome::Unscannable)
}

/// A `Content-Encoding` value the body is still plain under: `identity` or nothing.
fn usage_readable_coding(value: &[u8]) -> bool {
    value.split(|&b| b == b',').all(|coding| {
        let coding = coding.trim_ascii();
        coding.is_empty() || coding.eq_ignore_ascii_case(b"identity")
    })
}

fn outcome_of(error: UsageError) -> SettleOutcome {
    match error {
        UsageError::Missing => SettleOutcome::Missing,
        UsageError::Invalid => SettleOutcome::Invalid,
        UsageError::TooLarge => SettleOutcome::TooLarge,
        UsageError::Malformed => SettleOutcome::Malformed,
    }
}
