//! Header rewriting between client and upstream: hop-by-hop headers (RFC 9110 §7.6.1) never
//! cross the proxy, and the upstream learns who asked through X-Forwarded-* (and X-Real-IP
//! and Forwarded when configured); a client's other claims of who it is never cross
//! (`request::client_fields`).

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use crate::http1::encode::SenderFields;
use crate::http1::fields::visible_text;
pub(crate) use crate::http1::fields::{Role, list_items, role};
use crate::http1::request_fields::RequestFields;
use crate::request::client_fields::ClientFields;
use crate::request::id::{RequestId, X_REQUEST_ID};

pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Who asked, for the upstream's eyes.
pub(crate) struct Forwarded<'a> {
    /// The connection's peer address as a header value (made once per connection).
    pub peer: &'a HeaderValue,
    /// A trusted proxy's X-Forwarded-For is extended; anyone else's is replaced, so upstreams
    /// never see addresses a client made up.
    pub peer_trusted: bool,
    /// The client address the limiter counted, for the X-Real-IP and Forwarded the gateway
    /// writes when configured.
    pub client_ip: IpAddr,
    /// Which of the client's fields naming it are left out, and which the gateway writes.
    pub client_fields: &'a Arc<ClientFields>,
    pub proto: &'static str,
    pub request_id: &'a RequestId,
    /// The answer's body is read for the usage a limit settles by: it is asked for whole and
    /// without a content coding, whatever the client asks.
    pub plain_answer: bool,
}

/// The fields the gateway sets on a request going upstream. They are written after the
/// client's own fields, of which those with the same names are left out (`replaces`): adding
/// them to the request's map cost a hash and an insert each, and often a regrow of the map.
#[derive(Clone, Debug, Default)]
pub(crate) struct SetFields {
    /// The canonical host the request asked for, or (when it named none: HTTP/1.0, a health
    /// check) the server's authority, which the pool puts here. Written first of all fields.
    pub host: Option<Bytes>,
    /// X-Forwarded-Host repeats `host`: only when the client named it. Not derived from
    /// `host`: when the client named no host, the pool puts its server's authority there.
    pub forward_host: bool,
    pub forwarded_for: Option<HeaderValue>,
    pub forwarded_proto: Option<&'static str>,
    pub request_id: Option<RequestId>,
    /// The protocol of an upgrade the client asked for (with `Connection: upgrade`).
    pub upgrade: Option<HeaderValue>,
    /// The peer is a trusted proxy: the configured client-IP field it sent goes on.
    pub peer_trusted: bool,
    /// The client's fields naming it that are left out, and those the gateway writes with
    /// `client_ip`. None (a health check): only the fields above replace the request's.
    pub client_fields: Option<Arc<ClientFields>>,
    pub client_ip: Option<IpAddr>,
    /// `Accept-Encoding: identity` in place of the client's, and no `Range` or `If-Range`
    /// (`Forwarded::plain_answer`).
    pub plain_answer: bool,
}

impl SenderFields for SetFields {
    /// True for a client field that the gateway's own replace, or another claim of who the
    /// client is or what it first asked (`ClientFields`): whatever a client says about who
    /// forwarded it never reaches the upstream unchecked. One length-bucketed lookup each.
    fn leaves_out(&self, name: &[u8]) -> bool {
        let is = |known: &str| name.eq_ignore_ascii_case(known.as_bytes());
        let own = match name.len() {
            12 => is(X_REQUEST_ID.as_str()),
            15 => is(X_FORWARDED_FOR.as_str()) || (self.plain_answer && is("accept-encoding")),
            // An answer read for usage is asked for whole: a part of one is not its cost.
            5 => self.plain_answer && is("range"),
            8 => self.plain_answer && is("if-range"),
            16 => is(X_FORWARDED_HOST.as_str()),
            17 => is(X_FORWARDED_PROTO.as_str()),
            _ => false,
        };
        own || (self.client_fields.as_ref())
            .is_some_and(|fields| fields.leaves_out(name, self.peer_trusted))
    }

    /// Writes the Host line, which goes first (RFC 9110 §7.2 recommends it).
    fn encode_host(&self, buf: &mut Vec<u8>) {
        if let Some(host) = &self.host {
            buf.extend_from_slice(b"host: ");
            buf.extend_from_slice(host);
            buf.extend_from_slice(b"\r\n");
        }
    }

    /// Writes the other fields as head lines, in a fixed order, after the request's own.
    /// Each name is a constant with the line end before it and its `: ` after, written at
    /// once: a `HeaderName` apiece, its `: ` and the line end apart, cost a third more.
    fn encode(&self, buf: &mut Vec<u8>) {
        let client_host = self.host.as_ref().filter(|_| self.forward_host);
        // Formatted on the stack: a request that carries them allocates nothing more.
        let (mut real_ip, mut forwarded) = ([0; 64], [0; 64]);
        let (real_ip, forwarded) = match (&self.client_fields, self.client_ip) {
            (Some(fields), Some(ip)) => (
                fields.x_real_ip(ip, &mut real_ip),
                fields.forwarded(ip, &mut forwarded),
            ),
            _ => (None, None),
        };
        let lines: [(&[u8], Option<&[u8]>); 9] = [
            (b"\r\nx-forwarded-host: ", client_host.map(|host| &host[..])),
            (b"\r\nx-forwarded-for: ", bytes(&self.forwarded_for)),
            (b"\r\nx-real-ip: ", real_ip),
            (b"\r\nforwarded: ", forwarded),
            (
                b"\r\nx-forwarded-proto: ",
                self.forwarded_proto.map(str::as_bytes),
            ),
            (
                b"\r\nx-request-id: ",
                self.request_id.as_ref().map(RequestId::as_bytes),
            ),
            (
                b"\r\nconnection: ",
                self.upgrade.as_ref().map(|_| &b"upgrade"[..]),
            ),
            (b"\r\nupgrade: ", bytes(&self.upgrade)),
            (
                b"\r\naccept-encoding: ",
                self.plain_answer.then_some(&b"identity"[..]),
            ),
        ];
        // The first line's end comes before the second's name, the last one's after it.
        let mut line_start = 2;
        for (name, value) in lines {
            if let Some(value) = value {
                buf.extend_from_slice(&name[line_start..]);
                buf.extend_from_slice(value);
                line_start = 0;
            }
        }
        if line_start == 0 {
            buf.extend_from_slice(b"\r\n");
        }
    }
}

fn bytes(field: &Option<HeaderValue>) -> Option<&[u8]> {
    field.as_ref().map(HeaderValue::as_bytes)
}

/// The fields the gateway sets on a canonical request's way upstream: `host` is the canonical
/// host it asked for, `upgrade` the protocols its route lets it switch to.
pub(crate) fn to_upstream(
    fields: &RequestFields,
    forwarded: &Forwarded<'_>,
    host: Option<Bytes>,
    upgrade: Option<HeaderValue>,
) -> SetFields {
    let forwarded_for = if forwarded.peer_trusted {
        forwarded_for_chain(fields, forwarded.peer)
    } else {
        forwarded.peer.clone()
    };
    SetFields {
        peer_trusted: forwarded.peer_trusted,
        client_fields: Some(forwarded.client_fields.clone()),
        client_ip: Some(forwarded.client_ip),
        forward_host: host.is_some(),
        host,
        forwarded_for: Some(forwarded_for),
        forwarded_proto: Some(forwarded.proto),
        request_id: Some(forwarded.request_id.clone()),
        upgrade,
        plain_answer: forwarded.plain_answer,
    }
}

/// Every existing X-Forwarded-For line joined into one, then `peer`.
fn forwarded_for_chain(fields: &RequestFields, peer: &HeaderValue) -> HeaderValue {
    let mut value = String::new();
    for line in fields.get_all(&X_FORWARDED_FOR) {
        if let Some(text) = visible_text(line) {
            value.push_str(text.trim());
            value.push_str(", ");
        }
    }
    if value.is_empty() {
        return peer.clone();
    }
    value.push_str(peer.to_str().unwrap_or("unknown"));
    HeaderValue::from_str(&value).unwrap_or_else(|_| peer.clone())
}

#[cfg(test)]
mod tests;
