//! A request as the proxy handles it, from hyper or from the own HTTP/1.1 server.

use http::{Method, Request, Uri};
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use super::upstream::UpstreamBody;
use crate::request_fields::RequestFields;

pub struct ProxyRequest {
    pub method: Method,
    pub uri: Uri,
    pub fields: RequestFields,
    /// How a switch of protocols reaches the client's connection: hyper's, for a request
    /// that asks for one; the own server serves none.
    pub upgrade: Option<OnUpgrade>,
    pub body: UpstreamBody,
}

impl ProxyRequest {
    /// A request hyper read.
    pub fn from_hyper(request: Request<Incoming>) -> ProxyRequest {
        let (mut parts, body) = request.into_parts();
        ProxyRequest {
            upgrade: parts.extensions.remove::<OnUpgrade>(),
            method: parts.method,
            uri: parts.uri,
            fields: RequestFields::Map(parts.headers),
            body: Either::Left(body),
        }
    }
}
