//! Which protocol switches a route passes (RFC 9110 §7.8). A switched connection is a byte
//! tunnel the gateway no longer reads, so only protocols that carry no further HTTP requests
//! belong here: `h2c` never does, as it would turn the tunnel into unlimited HTTP/2.

use http::HeaderValue;
use http::header::{CONNECTION, UPGRADE};

use crate::http1::fields::{list_items, lists, visible_text};
use crate::http1::request_fields::RequestFields;

/// True when the request asks to switch protocols (`Connection: upgrade` plus `Upgrade`).
pub(crate) fn wants_upgrade(fields: &RequestFields) -> bool {
    fields.contains(&UPGRADE) && connection_has(fields, "upgrade")
}

/// True when a `Connection` field lists `token` (case-insensitive, over every line).
/// (`contains` first: it finds Connection by role, and most requests have none, where walking
/// the values would be work for nothing.)
pub(super) fn connection_has(fields: &RequestFields, token: &str) -> bool {
    fields.contains(&CONNECTION)
        && fields
            .get_all(&CONNECTION)
            .filter(|list| visible_text(list).is_some())
            .any(|list| lists(list, token.as_bytes()))
}

/// The protocols of `offered` (an Upgrade field value) that `allowed` names (lower-case
/// protocol names, as the config holds them), in the client's order; None when none is.
pub(crate) fn allowed_upgrade(offered: &HeaderValue, allowed: &[String]) -> Option<HeaderValue> {
    let passes = |item: &&[u8]| {
        let name = item.split(|&b| b == b'/').next().unwrap_or_default();
        !name.eq_ignore_ascii_case(b"h2c")
            && allowed
                .iter()
                .any(|allowed| name.eq_ignore_ascii_case(allowed.as_bytes()))
    };
    let items: Vec<&[u8]> = list_items(offered.as_bytes())
        .filter(|item| !item.is_empty())
        .collect();
    let kept: Vec<&[u8]> = items.iter().copied().filter(|item| passes(item)).collect();
    if kept.is_empty() {
        return None;
    }
    if kept.len() == items.len() {
        return Some(offered.clone());
    }
    HeaderValue::from_bytes(&kept.join(&b", "[..])).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(offered: &str, routes: &[&str]) -> Option<String> {
        let routes: Vec<String> = routes.iter().map(|r| r.to_string()).collect();
        allowed_upgrade(&HeaderValue::from_str(offered).unwrap(), &routes)
            .map(|value| value.to_str().unwrap().to_string())
    }

    #[test]
    fn only_allowed_protocols_pass_and_h2c_never() {
        let websocket = &["websocket"];
        assert_eq!(
            allowed("websocket", websocket).as_deref(),
            Some("websocket")
        );
        assert_eq!(
            allowed("WebSocket", websocket).as_deref(),
            Some("WebSocket")
        );
        assert_eq!(allowed("h2c", websocket), None);
        assert_eq!(allowed("h2c", &["h2c"]), None);
        assert_eq!(
            allowed("h2c, websocket", websocket).as_deref(),
            Some("websocket")
        );
        assert_eq!(
            allowed("foo/2, websocket/13", &["foo"]).as_deref(),
            Some("foo/2")
        );
        assert_eq!(allowed("websocket", &[]), None);
        assert_eq!(allowed(" , ", websocket), None);
    }
}
