//! A request as a server parsed it, from hyper (HTTP/2) or from the own HTTP/1 server: what
//! `crate::request::canonical` validates and puts in canonical form before anything reads it.

use http::{Method, Request, Uri, Version};
use hyper::body::Incoming;

use crate::http1::request_body::ServerBody;
use crate::http1::request_fields::RequestFields;
use crate::http1::request_head::FromParts;
use crate::http1::upgrade::PendingUpgrade;

/// A request body as it arrives.
pub(crate) enum ArrivingBody {
    None,
    /// Over HTTP/2, hyper's stream.
    Hyper(Incoming),
    /// Over HTTP/1, read by the own server as it is asked for.
    Http1(ServerBody),
}

pub(crate) struct ProxyRequest {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub fields: RequestFields,
    /// How a switch of protocols reaches the client's connection, for an HTTP/1 request that
    /// asks for one.
    pub upgrade: Option<PendingUpgrade>,
    pub body: ArrivingBody,
}

impl ProxyRequest {
    /// A request hyper read (HTTP/2: no upgrades).
    pub(crate) fn from_hyper(request: Request<Incoming>) -> ProxyRequest {
        let (parts, body) = request.into_parts();
        ProxyRequest {
            upgrade: None,
            method: parts.method,
            uri: parts.uri,
            version: parts.version,
            fields: RequestFields::Map(parts.headers),
            body: ArrivingBody::Hyper(body),
        }
    }
}

impl FromParts for ProxyRequest {
    /// A request the own HTTP/1 server read; the server connects its body and upgrade.
    #[inline]
    fn from_parts(method: Method, uri: Uri, version: Version, fields: RequestFields) -> Self {
        ProxyRequest {
            method,
            uri,
            version,
            fields,
            upgrade: None,
            body: ArrivingBody::None,
        }
    }
}
