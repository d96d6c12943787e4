//! A request as a server parsed it, from hyper or from the own HTTP/1.1 server: what
//! `crate::canonical` validates and puts in canonical form before anything reads it.

use bytes::Bytes;
use http::{Method, Request, Uri, Version};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use crate::request_fields::RequestFields;

/// A request body as it arrives: hyper's stream, or none (the own server reads no bodies).
pub type ArrivingBody = Either<Incoming, Empty<Bytes>>;

pub struct ProxyRequest {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub fields: RequestFields,
    /// How a switch of protocols reaches the client's connection: hyper's, for a request
    /// that asks for one; the own server serves none.
    pub upgrade: Option<OnUpgrade>,
    pub body: ArrivingBody,
}

impl ProxyRequest {
    /// A request hyper read.
    pub fn from_hyper(request: Request<Incoming>) -> ProxyRequest {
        let (mut parts, body) = request.into_parts();
        ProxyRequest {
            upgrade: parts.extensions.remove::<OnUpgrade>(),
            method: parts.method,
            uri: parts.uri,
            version: parts.version,
            fields: RequestFields::Map(parts.headers),
            body: Either::Left(body),
        }
    }
}
