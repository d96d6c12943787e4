//! `charge` of a `[[limits]]` entry: `reserve`, `settle`, `statuses` and `refund`.

use std::sync::Arc;

use http::HeaderName;

use super::problems::{Problems, echo};
use super::raw::RawCharge;
use crate::limit::charge::{Charge, Refund, SettleFrom, Statuses};
use crate::usage::UsageFields;

/// The most `json:` fields one `settle` sums.
const MOST_FIELDS: usize = 8;

/// The largest `reserve`: a route's `cost` has the same bound.
const LARGEST_RESERVE: i64 = 1_000_000;

pub(super) fn charge(raw: &RawCharge, path: &str, problems: &mut Problems) -> Option<Charge> {
    if raw.reserve.is_none()
        && raw.settle.is_none()
        && raw.statuses.is_none()
        && raw.refund.is_none()
    {
        problems.push(
            path,
            "expected at least one of reserve, settle, statuses or refund",
        );
        return None;
    }
    let reserve = raw.reserve.map(|_| {
        problems.number(
            format!("{path}.reserve"),
            raw.reserve,
            (1, LARGEST_RESERVE),
            1,
        ) as u64
    });
    let settle = raw
        .settle
        .as_ref()
        .and_then(|value| settle(value, &format!("{path}.settle"), problems));
    let statuses = raw
        .statuses
        .as_deref()
        .map(|entries| statuses(entries, &format!("{path}.statuses"), problems));
    let refund = raw
        .refund
        .as_deref()
        .map(|entries| refund(entries, &format!("{path}.refund"), problems));
    Some(Charge {
        reserve,
        settle,
        statuses,
        refund,
    })
}

const SETTLE_FORMS: &str =
    "\"header:<name>\", \"json:<field.path>\" or an array of \"json:\" fields";

/// `settle`: one `header:` or `json:` source, or an array of `json:` fields to sum.
fn settle(value: &toml::Value, path: &str, problems: &mut Problems) -> Option<SettleFrom> {
    match value {
        toml::Value::String(source) => match source.split_once(':') {
            Some(("header", name)) => match HeaderName::from_bytes(name.as_bytes()) {
                Ok(name) => Some(SettleFrom::Header(name)),
                Err(_) => {
                    problems.push(
                        path,
                        format!(
                            "expected a header name after \"header:\", got {}",
                            echo(name)
                        ),
                    );
                    None
                }
            },
            Some(("json", field)) => body_fields(&[(path.to_owned(), field)], problems),
            _ => {
                problems.push(
                    path,
                    format!("expected {SETTLE_FORMS}, got {}", echo(source)),
                );
                None
            }
        },
        toml::Value::Array(entries) if !entries.is_empty() => {
            let mut fields = Vec::new();
            for (i, entry) in entries.iter().enumerate() {
                let entry_path = format!("{path}[{i}]");
                match entry.as_str().and_then(|s| s.strip_prefix("json:")) {
                    Some(field) => fields.push((entry_path, field)),
                    None => problems.push(
                        entry_path,
                        format!("expected a \"json:<field.path>\" string (only body fields are summed), got {entry}"),
                    ),
                }
            }
            if fields.len() > MOST_FIELDS {
                problems.push(
                    path,
                    format!(
                        "expected at most {MOST_FIELDS} fields, got {}",
                        fields.len()
                    ),
                );
                return None;
            }
            if fields.len() != entries.len() {
                return None;
            }
            body_fields(&fields, problems)
        }
        other => {
            problems.push(path, format!("expected {SETTLE_FORMS}, got {other}"));
            None
        }
    }
}

/// `json:` fields: each a dotted path of object keys (the rules are `usage::UsageFields`').
fn body_fields(fields: &[(String, &str)], problems: &mut Problems) -> Option<SettleFrom> {
    let mut ok = true;
    // Each alone first, so that an error names the entry it is in.
    for (path, field) in fields {
        if let Err(problem) = UsageFields::parse(&[field]) {
            problems.push(path.clone(), format!("expected {}: {problem}", FIELD_FORM));
            ok = false;
        }
    }
    if !ok {
        return None;
    }
    let names: Vec<&str> = fields.iter().map(|(_, field)| *field).collect();
    match UsageFields::parse(&names) {
        Ok(parsed) => Some(SettleFrom::Body(Arc::new(parsed))),
        Err(problem) => {
            // Only a repeated path is left: name the entry that repeats it.
            let repeated = fields
                .iter()
                .enumerate()
                .find(|(i, (_, field))| names[..*i].contains(field))
                .map_or_else(|| fields[0].0.clone(), |(_, (path, _))| path.clone());
            problems.push(repeated, format!("expected each field once: {problem}"));
            None
        }
    }
}

const FIELD_FORM: &str =
    "a field path of at most 8 object keys joined by '.', like \"json:usage.total_tokens\"";

fn statuses(entries: &[toml::Value], path: &str, problems: &mut Problems) -> Statuses {
    if entries.is_empty() {
        problems.push(
            path,
            "expected at least one status, like [401, 403] or [\"4xx\"]",
        );
    }
    let parsed = entries.iter().enumerate().filter_map(|(i, entry)| {
        Statuses::parse_entry(entry)
            .map_err(|message| problems.push(format!("{path}[{i}]"), message))
            .ok()
    });
    Statuses(parsed.collect())
}

fn refund(entries: &[toml::Value], path: &str, problems: &mut Problems) -> Refund {
    if entries.is_empty() {
        problems.push(
            path,
            "expected at least one of \"upstream_error\", a status or a class like \"5xx\"",
        );
    }
    let mut refund = Refund::default();
    let mut ranges = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if entry.as_str() == Some("upstream_error") {
            refund.upstream_error = true;
            continue;
        }
        match Statuses::parse_entry(entry) {
            Ok(range) => ranges.push(range),
            Err(message) => problems.push(
                format!("{path}[{i}]"),
                format!("expected \"upstream_error\" or a status: {message}"),
            ),
        }
    }
    refund.statuses = Statuses(ranges.into());
    refund
}
