//! `GET /limits/<name>/state` and `POST` (or `DELETE`) `/limits/<name>/reset`: where one
//! identity of a limit stands, and clearing its state to unblock a customer. The identity is
//! named by query parameters called as the limit's `key` parts are written
//! (`header:x-api-key=...`, `route=default`, `query:token=...`), `ip=` the client's address
//! (for an `ip` part, the `missing = "ip"` stand-in, exempt lists and tiers by address), and
//! `key=` for the only part of a one-part key. Values are hashed as the limiter hashes them
//! and dropped: never stored, never logged.

use std::net::IpAddr;

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::json;

use crate::admission::limiter::{InspectError, NamedKey, Standing};
use crate::limit::key::KeyPart;
use crate::limit::whole_seconds;
use crate::runtime::Runtime;

/// The answer to `/limits/...`, or None for another path.
pub(super) async fn answer(
    runtime: &Runtime,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Option<Response<Full<Bytes>>> {
    let (name, action) = path.strip_prefix("/limits/")?.rsplit_once('/')?;
    let name = String::from_utf8_lossy(&decoded(name)).into_owned();
    let allowed = match action {
        "state" => "GET, HEAD",
        "reset" => "POST, DELETE",
        _ => return None,
    };
    if !allowed.split(", ").any(|m| m == method.as_str()) {
        let detail = format!("{method} is not allowed here; use {allowed}");
        let mut answer = problem(StatusCode::METHOD_NOT_ALLOWED, &detail);
        let allow = http::HeaderValue::from_static(allowed);
        answer.headers_mut().insert(header::ALLOW, allow);
        return Some(answer);
    }
    let limiter = &runtime.limiter;
    let Some(rule) = limiter.rules.iter().position(|r| *r.name == *name) else {
        let known: Vec<&str> = limiter.rules.iter().map(|r| &*r.name).collect();
        let detail = format!("no limit named {name:?}; the limits are {known:?}");
        return Some(problem(StatusCode::NOT_FOUND, &detail));
    };
    let key = match named_key(runtime, rule, query.unwrap_or_default()) {
        Ok(key) => key,
        Err(detail) => return Some(problem(StatusCode::BAD_REQUEST, &detail)),
    };
    let result = match action {
        "state" => limiter.standing(rule, &key, runtime.clock.now()).await,
        _ => limiter.forget(rule, &key).await,
    };
    Some(match (result, action) {
        (Ok(standing), "state") => state_document(&name, &standing),
        (Ok(_), _) => {
            let mut answer = Response::new(Full::new(Bytes::new()));
            *answer.status_mut() = StatusCode::NO_CONTENT;
            answer
        }
        (Err(error @ InspectError::Missing { .. }), _) => {
            problem(StatusCode::BAD_REQUEST, &error.to_string())
        }
        (Err(error @ InspectError::Store(_)), _) => {
            problem(StatusCode::SERVICE_UNAVAILABLE, &error.to_string())
        }
    })
}

/// The identity the query names under limit `rule`: a value for each parameter, each a part
/// of the limit's key or of `[plans] key`, or `ip`, at most once.
fn named_key(runtime: &Runtime, rule: usize, query: &str) -> Result<NamedKey, String> {
    let limiter = &runtime.limiter;
    let key_parts = &limiter.rules[rule].key;
    let plans_key = limiter.plans.as_ref().map(|plans| &plans.key);
    let mut named = NamedKey::default();
    let pairs = query.split('&').filter(|pair| !pair.is_empty());
    for pair in pairs {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = String::from_utf8_lossy(&decoded(name)).into_owned();
        let value = decoded(value);
        let part = match name.as_str() {
            "key" if key_parts.len() == 1 => key_parts[0].clone(),
            "key" => {
                return Err(format!(
                    "key= names the only part of a one-part key; this limit's key has {} parts: name each",
                    key_parts.len()
                ));
            }
            name => KeyPart::parse(name).map_err(|_| unexpected(name, key_parts))?,
        };
        if part != KeyPart::Ip && !key_parts.contains(&part) && plans_key != Some(&part) {
            return Err(unexpected(&name, key_parts));
        }
        let given_before = match part {
            KeyPart::Ip => named.client_ip.is_some(),
            _ => named.values.iter().any(|(p, _)| *p == part),
        };
        if given_before {
            return Err(format!("{} is given twice", part.describe()));
        }
        match part {
            KeyPart::Ip => {
                let text = String::from_utf8_lossy(&value);
                let ip: IpAddr = text
                    .parse()
                    .map_err(|_| format!("ip: expected an IPv4 or IPv6 address, got {text:?}"))?;
                named.client_ip = Some(ip);
                named.grouped_ip = Some(runtime.client_ip.group(ip));
            }
            // As a request's: an empty value is absent, HEAD counts as GET.
            _ if value.is_empty() => {}
            KeyPart::Method if value == b"HEAD" => named.values.push((part, b"GET".to_vec())),
            _ => named.values.push((part, value)),
        }
    }
    Ok(named)
}

fn unexpected(name: &str, key_parts: &[KeyPart]) -> String {
    let parts: Vec<String> = key_parts.iter().map(KeyPart::describe).collect();
    format!(
        "unexpected parameter {name:?}: expected the limit's key parts {parts:?} (named as in its key, e.g. header:x-api-key), ip, or [plans] key"
    )
}

fn state_document(limit: &str, standing: &Standing) -> Response<Full<Bytes>> {
    let windows: Vec<serde_json::Value> = (standing.windows.iter())
        .map(|window| {
            let policy = &window.policy;
            json!({
                "policy": &*policy.name,
                "limit": policy.limit,
                "window": whole_seconds(policy.window),
                "remaining": window.remaining,
                "reset": whole_seconds(window.reset),
                "debt_until": window.debt_until.map(whole_seconds),
            })
        })
        .collect();
    let document = json!({
        "limit": limit,
        "tier": standing.tier,
        "identity": standing.identity.map(|id| format!("{id:032x}")),
        "exempt_list": standing.exempt_list,
        "limited": standing.identity.is_some(),
        "windows": windows,
    });
    let mut answer = Response::new(Full::new(Bytes::from(document.to_string())));
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    answer
}

/// A problem+json answer, as the gateway's own errors are.
fn problem(status: StatusCode, detail: &str) -> Response<Full<Bytes>> {
    let document = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
        "request_id": crate::request::id::mint().as_str(),
    });
    let mut answer = Response::new(Full::new(Bytes::from(document.to_string())));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/problem+json"),
    );
    answer
}

/// `%XX` decoded and `+` as a space (`application/x-www-form-urlencoded`); a `%` without two
/// hex digits stays as it is.
fn decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes.get(i + 1..i + 3))
            .filter(|digits| digits.iter().all(u8::is_ascii_hexdigit))
            .and_then(|digits| u8::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}
