//! The settings of the canonical request step (`crate::request::canonical`): `[server]
//! underscores_in_headers` and `escaped_slashes`, and what a route may say about requests
//! (its path prefix in canonical form, its methods, its upgrades, whether case matters).

use http::Method;

use super::problems::{Problems, echo};
use super::raw::{RawRoute, RawServer};
use crate::limit::key::KeyPart;
use crate::limit::rules::{LimitRule, Plans};
use crate::request::canonical::Underscores;
use crate::request::canonical::path::{self, EscapedSlashes};

pub(super) fn underscores(raw: &RawServer, problems: &mut Problems) -> Underscores {
    match raw.underscores_in_headers.as_deref() {
        None | Some("drop") => Underscores::Drop,
        Some("allow") => Underscores::Allow,
        Some("reject") => Underscores::Reject,
        Some(other) => {
            problems.push(
                "server.underscores_in_headers",
                format!(
                    "expected \"drop\", \"allow\" or \"reject\", got {}",
                    echo(other)
                ),
            );
            Underscores::Drop
        }
    }
}

pub(super) fn escaped_slashes(raw: &RawServer, problems: &mut Problems) -> EscapedSlashes {
    match raw.escaped_slashes.as_deref() {
        None | Some("keep") => EscapedSlashes::Keep,
        Some("reject") => EscapedSlashes::Reject,
        Some(other) => {
            problems.push(
                "server.escaped_slashes",
                format!("expected \"keep\" or \"reject\", got {}", echo(other)),
            );
            EscapedSlashes::Keep
        }
    }
}

/// A route's path prefix: a path in canonical form, since only canonical paths are matched.
pub(super) fn path_prefix(raw: &RawRoute, path: &str, problems: &mut Problems) -> String {
    let prefix = raw.path_prefix.clone().unwrap_or_else(|| "/".to_string());
    let key = format!("{path}.path_prefix");
    match path::normalize(&prefix, EscapedSlashes::Keep) {
        Ok(None) if prefix.contains(';') => problems.push(
            key,
            format!(
                "expected a path without `;` parameters, which routes do not match, got {}",
                echo(&prefix)
            ),
        ),
        Ok(None) => {}
        Ok(Some(canonical)) => problems.push(
            key,
            format!(
                "expected a path in the canonical form requests are matched in, got {}; write {}",
                echo(&prefix),
                echo(&canonical)
            ),
        ),
        Err(error) => problems.push(
            key,
            format!(
                "expected a path such as \"/v1/\", got {}: {error}",
                echo(&prefix)
            ),
        ),
    }
    prefix
}

/// Methods as requests must spell them: upper-case letters, `_` and `-` (any other request
/// method is refused before routing, so a route naming one could never match). GET brings
/// HEAD, as nginx's `limit_except GET` does: frameworks answer HEAD with the GET handler, so
/// a limit on GET must count HEAD too.
pub(super) fn methods(texts: &[String], path: &str, problems: &mut Problems) -> Vec<Method> {
    if texts.is_empty() {
        problems.push(
            path,
            "expected at least one method, or no `methods` key to match any",
        );
    }
    let valid = |text: &str| {
        !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
    };
    let mut methods: Vec<Method> = texts
        .iter()
        .enumerate()
        .filter_map(|(i, text)| {
            let upper = text.to_ascii_uppercase();
            match Method::from_bytes(upper.as_bytes()) {
                Ok(method) if valid(&upper) => Some(method),
                _ => {
                    problems.push(
                        format!("{path}[{i}]"),
                        format!("expected an HTTP method such as \"GET\" (letters, `_` and `-`), got {}", echo(text)),
                    );
                    None
                }
            }
        })
        .collect();
    if methods.contains(&Method::GET) && !methods.contains(&Method::HEAD) {
        methods.push(Method::HEAD);
    }
    methods
}

/// The protocols a route passes as upgrades, lower-case; `["websocket"]` by default.
pub(super) fn upgrades(raw: &RawRoute, path: &str, problems: &mut Problems) -> Vec<String> {
    let Some(texts) = &raw.upgrades else {
        return vec!["websocket".to_string()];
    };
    let is_token = |text: &str| {
        !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    texts
        .iter()
        .enumerate()
        .filter_map(|(i, text)| {
            let key = format!("{path}.upgrades[{i}]");
            if text.eq_ignore_ascii_case("h2c") {
                problems.push(key, "h2c is never passed as an upgrade: its connection would carry HTTP/2 requests past every limit");
                None
            } else if !is_token(text) {
                problems.push(key, format!("expected a protocol name such as \"websocket\", got {}", echo(text)));
                None
            } else {
                Some(text.to_ascii_lowercase())
            }
        })
        .collect()
}

/// A route's `TRACE` could never match unless TRACE is forwarded: it is answered 405 before
/// routing.
pub(super) fn check_trace_routes(allow_trace: bool, routes: &[RawRoute], problems: &mut Problems) {
    if allow_trace {
        return;
    }
    for (i, route) in routes.iter().enumerate() {
        for (j, text) in route.methods.iter().flatten().enumerate() {
            if text.eq_ignore_ascii_case("TRACE") {
                problems.push(
                    format!("routes[{i}].methods[{j}]"),
                    "TRACE is answered 405 before routing: set [server] allow_trace = true to route it",
                );
            }
        }
    }
}

/// A key part that reads a field whose name has a `_` can only see it when such fields are
/// allowed; otherwise the field is gone before keys are read and the limit would never apply.
pub(super) fn check_underscored_keys(
    underscores: Underscores,
    limits: &[LimitRule],
    plans: Option<&Plans>,
    problems: &mut Problems,
) {
    if underscores == Underscores::Allow {
        return;
    }
    let mut complain = |key: String, name: &str| {
        problems.push(
            key,
            format!("the field name {name:?} has an underscore: set [server] underscores_in_headers = \"allow\" to key on it"),
        );
    };
    for (i, limit) in limits.iter().enumerate() {
        for (j, part) in limit.key.iter().enumerate() {
            if let KeyPart::Header(name) = part
                && name.as_str().contains('_')
            {
                complain(format!("limits[{i}].key[{j}]"), name.as_str());
            }
        }
    }
    if let Some(KeyPart::Header(name)) = plans.map(|plans| &plans.key)
        && name.as_str().contains('_')
    {
        complain("plans.key".to_string(), name.as_str());
    }
}
