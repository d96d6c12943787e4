//! A limit's `charge`: what admission reserves, and what the answer then says the request
//! really cost. Pure: the answer's facts come in, the units to settle at come out.
//!
//! The order a charge is read in, first match wins:
//! 1. `refund`: the answer is one it lists (`upstream_error`, a status or a class): 0.
//! 2. `statuses`: the answer's status is not one it lists: 0.
//! 3. `settle`: the value the answer's header or body reports (read by the caller).
//! 4. Otherwise what was reserved.

use std::sync::Arc;

use http::HeaderName;

use crate::usage::UsageFields;

/// How a limit is charged when it has a `charge`; a limit without one reserves the route's
/// cost and never settles.
#[derive(Debug, Clone)]
pub struct Charge {
    /// Units each request reserves; None: the route's cost.
    pub reserve: Option<u64>,
    pub settle: Option<SettleFrom>,
    /// Kept only when the answer's status is one of these.
    pub statuses: Option<Statuses>,
    pub refund: Option<Refund>,
}

/// Where the real cost is read.
#[derive(Debug, Clone)]
pub enum SettleFrom {
    /// A response header holding a non-negative integer.
    Header(HeaderName),
    /// Fields of a JSON or event-stream body, summed (`json:usage.total_tokens`, ...).
    Body(Arc<UsageFields>),
}

/// HTTP statuses: single codes and classes (`401`, `"4xx"`), as inclusive ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Statuses(pub Box<[(u16, u16)]>);

impl Statuses {
    pub fn contains(&self, status: u16) -> bool {
        self.0
            .iter()
            .any(|&(low, high)| (low..=high).contains(&status))
    }

    /// One entry: a code from 100 to 599, or a class `"1xx"` to `"5xx"` (any case).
    pub fn parse_entry(entry: &toml::Value) -> Result<(u16, u16), String> {
        match entry {
            toml::Value::Integer(code) if (100..=599).contains(code) => {
                Ok((*code as u16, *code as u16))
            }
            toml::Value::String(class) => match class.as_bytes() {
                [digit @ b'1'..=b'5', x, y]
                    if x.eq_ignore_ascii_case(&b'x') && y.eq_ignore_ascii_case(&b'x') =>
                {
                    let low = u16::from(digit - b'0') * 100;
                    Ok((low, low + 99))
                }
                _ => Err(format!(
                    "expected a status class \"1xx\" to \"5xx\", got {class:?}"
                )),
            },
            other => Err(format!(
                "expected a status from 100 to 599 or a class like \"4xx\", got {other}"
            )),
        }
    }
}

/// When a reservation is given back whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refund {
    /// No upstream answered: the gateway made the answer (a connect failure, a timeout, no
    /// healthy server).
    pub upstream_error: bool,
    pub statuses: Statuses,
}

/// What settling needs to know of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub from: AnsweredBy,
}

/// Who made an answer, and what the upstream may have done with the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredBy {
    /// An upstream's answer: its status and fields are the upstream's word.
    Upstream,
    /// Made here, and no upstream received the request (no healthy server, a connection or
    /// TLS handshake that failed): nothing was done.
    NotSent,
    /// Made here once the request may have reached an upstream: it did not answer in time or
    /// broke off (`upstream_error`), or the client's own body failed. What the upstream did is
    /// not known.
    Unknown { upstream_error: bool },
}

impl Answer {
    /// No upstream answered: the gateway's own 502, 503 or 504 (a `refund`'s `upstream_error`).
    fn upstream_error(&self) -> bool {
        matches!(
            self.from,
            AnsweredBy::NotSent
                | AnsweredBy::Unknown {
                    upstream_error: true
                }
        )
    }
}

/// What a charge makes of an answer's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtHead {
    /// Settle at this many units now.
    Settle(u64),
    /// Read the value from this header of the answer.
    Header(HeaderName),
    /// Read it from the body, at its end.
    Body(Arc<UsageFields>),
}

impl Charge {
    /// What the reservation of `reserved` units becomes, as far as the head of `answer` tells.
    /// Statuses are judged only on an upstream's answer: one the gateway made after the request
    /// may have reached the upstream (a client body that broke mid-way, a timeout) keeps the
    /// reservation, as what the upstream did with it is not known.
    pub fn at_head(&self, answer: Answer, reserved: u64) -> AtHead {
        let upstream = answer.from == AnsweredBy::Upstream;
        if let Some(refund) = &self.refund
            && ((refund.upstream_error && answer.upstream_error())
                || (upstream && refund.statuses.contains(answer.status)))
        {
            return AtHead::Settle(0);
        }
        match answer.from {
            AnsweredBy::Upstream => {}
            // Nothing was done: a failed attempt is no failure of what the statuses count.
            AnsweredBy::NotSent if self.statuses.is_some() => return AtHead::Settle(0),
            // No usage to read either way: what was reserved stands.
            AnsweredBy::NotSent | AnsweredBy::Unknown { .. } => return AtHead::Settle(reserved),
        }
        if let Some(statuses) = &self.statuses
            && !statuses.contains(answer.status)
        {
            return AtHead::Settle(0);
        }
        match &self.settle {
            Some(SettleFrom::Header(name)) => AtHead::Header(name.clone()),
            Some(SettleFrom::Body(fields)) => AtHead::Body(fields.clone()),
            None => AtHead::Settle(reserved),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statuses(entries: &[toml::Value]) -> Statuses {
        Statuses(
            entries
                .iter()
                .map(|e| Statuses::parse_entry(e).unwrap())
                .collect(),
        )
    }

    /// An upstream's answer, or (`upstream_error`) the gateway's when no upstream answered
    /// after the request was sent.
    fn answer(status: u16, upstream_error: bool) -> Answer {
        let from = match upstream_error {
            false => AnsweredBy::Upstream,
            true => AnsweredBy::Unknown { upstream_error },
        };
        Answer { status, from }
    }

    #[test]
    fn statuses_take_codes_and_classes_and_refuse_the_rest() {
        let set = statuses(&[toml::Value::Integer(401), toml::Value::String("5XX".into())]);
        assert!(set.contains(401) && set.contains(500) && set.contains(599));
        assert!(!set.contains(400) && !set.contains(402) && !set.contains(600));
        for bad in [
            toml::Value::Integer(99),
            toml::Value::Integer(600),
            toml::Value::String("6xx".into()),
            toml::Value::String("4x".into()),
            toml::Value::String("401".into()),
            toml::Value::Boolean(true),
        ] {
            assert!(Statuses::parse_entry(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn failed_logins_keep_only_the_failures() {
        let charge = Charge {
            reserve: None,
            settle: None,
            statuses: Some(statuses(&[401.into(), 403.into()])),
            refund: None,
        };
        assert_eq!(charge.at_head(answer(401, false), 1), AtHead::Settle(1));
        assert_eq!(charge.at_head(answer(200, false), 1), AtHead::Settle(0));
        // A login never sent is no failed login.
        let not_sent = Answer {
            status: 502,
            from: AnsweredBy::NotSent,
        };
        assert_eq!(charge.at_head(not_sent, 1), AtHead::Settle(1 - 1));
        // One the upstream may have judged before the gateway answered (a timeout, the
        // client's body broken after the head went) stays counted.
        assert_eq!(charge.at_head(answer(504, true), 1), AtHead::Settle(1));
        let broken_body = Answer {
            status: 400,
            from: AnsweredBy::Unknown {
                upstream_error: false,
            },
        };
        assert_eq!(charge.at_head(broken_body, 1), AtHead::Settle(1));
    }

    #[test]
    fn a_refund_comes_first_and_a_settle_needs_an_upstream_answer() {
        let header = HeaderName::from_static("x-usage-tokens");
        let charge = Charge {
            reserve: Some(1000),
            settle: Some(SettleFrom::Header(header.clone())),
            statuses: None,
            refund: Some(Refund {
                upstream_error: true,
                statuses: statuses(&["5xx".into()]),
            }),
        };
        assert_eq!(
            charge.at_head(answer(200, false), 1000),
            AtHead::Header(header)
        );
        assert_eq!(charge.at_head(answer(503, false), 1000), AtHead::Settle(0));
        assert_eq!(charge.at_head(answer(504, true), 1000), AtHead::Settle(0));
        let without_refund = Charge {
            refund: None,
            ..charge
        };
        assert_eq!(
            without_refund.at_head(answer(502, true), 1000),
            AtHead::Settle(1000)
        );
    }
}
