//! Step 2 of the pipeline (docs/ARCHITECTURE.md): a parsed request, from the own HTTP/1 server
//! or hyper's HTTP/2, is validated and put in canonical form once, here. Client IP, routing, IP
//! lists, limit keys and the forwarded head all read the `Request` this makes, so what the
//! limiter judges is what the upstream receives (docs/requests.md, "What the proxy normalises and
//! refuses").
//!
//! Invariants of a `Request`: its method is an upper-case token; its fields hold no hop-by-hop
//! field, none that `Connection` named, no Host and (by default) no name with `_`; `host` is the
//! one valid host it asked for; `target` is its canonical path and its query as sent.

mod arriving;
pub mod host;
pub mod path;
mod trailers;
mod upgrade;

use std::sync::Arc;

use crate::http1::upgrade::PendingUpgrade;
use bytes::Bytes;
use http::header::UPGRADE;
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, Uri, Version};
use http_body_util::{Either, Empty};

use crate::http1::request_fields::RequestFields;
pub(crate) use arriving::{ArrivingBody, ProxyRequest};
pub(crate) use host::HostError;
pub(crate) use path::{EscapedSlashes, PathError};
pub(crate) use trailers::{ClientBody, TrailerFilter};
pub(crate) use upgrade::{allowed_upgrade, wants_upgrade};

/// Body sent upstream: the client's streamed body, or nothing (retries, health checks, and
/// the bodiless requests the gateway's own HTTP/1.1 server reads).
pub(crate) type UpstreamBody = Either<ClientBody, Empty<Bytes>>;

/// What to do with a field name that has a `_` (nginx `underscores_in_headers`, Envoy
/// `headers_with_underscores_action`): upstreams that fold `_` into `-` would read
/// `Transfer_Encoding` as a framing field the gateway never saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Underscores {
    /// Leave such fields out of the request (the default, as nginx does).
    #[default]
    Drop,
    /// Keep them, as any other field.
    Allow,
    /// Answer 400.
    Reject,
}

/// The canonical-form settings of a config (`[server]`), made once per config.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub escaped_slashes: EscapedSlashes,
    pub underscores: Underscores,
    /// `[server] allow_trace`: TRACE goes upstream; otherwise it is refused (405).
    pub allow_trace: bool,
    pub trailers: Arc<TrailerFilter>,
}

/// Why a request has no canonical form: each is a 400, but for the two `status` names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadRequest {
    #[error("the method {0:?} is not an upper-case token")]
    Method(String),
    #[error("CONNECT is not served: this gateway is not a forward proxy")]
    Connect,
    /// RFC 9110 §9.3.8: TRACE echoes the request, fields the gateway added included, to
    /// whoever sent it; nginx answers it 405 too.
    #[error("TRACE is not served")]
    Trace,
    #[error("the request has no Host field")]
    MissingHost,
    #[error("the request has more than one Host field")]
    RepeatedHost,
    #[error("invalid host: {0}")]
    Host(HostError),
    #[error("the :authority and the Host field name different hosts")]
    AuthorityMismatch,
    #[error("invalid request target: {0}")]
    Path(PathError),
    #[error("the field name {0:?} has an underscore, which this gateway does not accept")]
    Underscore(String),
    #[error("the value of {0:?} starts or ends with a blank")]
    PaddedValue(String),
    #[error("the transfer coding {0:?} is not implemented: only chunked is")]
    TransferCoding(String),
    /// An HTTP/2 `:scheme` other than http or https: this gateway serves those origins
    /// only, and an upstream told of another may resolve the target differently.
    #[error("the scheme {0:?} is not served: only http and https are")]
    Scheme(String),
}

/// The host a request asked for, in canonical form (`host::canonical`): ASCII letters,
/// digits and `-._:[]`, so a field value as it is.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    value: Bytes,
    name_len: usize,
}

impl Host {
    /// Name and port, as the upstream receives it in Host and X-Forwarded-Host.
    #[cfg(any(test, fuzzing, feature = "testing"))]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.value
    }

    pub(crate) fn into_bytes(self) -> Bytes {
        self.value
    }

    /// The name without the port: what routes and `host` keys read.
    pub(crate) fn name(&self) -> &[u8] {
        &self.value[..self.name_len]
    }

    /// The canonical form of `raw` (reusing it when it is canonical already).
    fn of(raw: Bytes) -> Result<Host, HostError> {
        let canonical = host::canonical(&raw)?;
        let name_len = canonical.name_len;
        let value = match canonical.text {
            std::borrow::Cow::Borrowed(_) => raw,
            std::borrow::Cow::Owned(text) => Bytes::from(text),
        };
        Ok(Host { value, name_len })
    }
}

/// A switch of protocols the client asked for (`Connection: upgrade` and `Upgrade`).
pub(crate) struct Upgrade {
    /// The protocols offered, as the client listed them.
    pub protocols: HeaderValue,
    /// How the switched connection reaches the tunnel; HTTP/2 has none.
    pub connection: Option<PendingUpgrade>,
}

/// A request in canonical form: the only request the rest of the pipeline sees.
pub(crate) struct Request {
    pub method: Method,
    pub host: Option<Host>,
    /// The canonical path and the query as sent: what the upstream receives.
    pub target: PathAndQuery,
    /// The path without segment parameters, when it had some (`path::without_parameters`).
    matched_path: Option<Box<str>>,
    pub fields: RequestFields,
    pub upgrade: Option<Upgrade>,
    pub body: UpstreamBody,
}

impl Request {
    /// The canonical path, as the upstream receives it.
    pub(crate) fn path(&self) -> &str {
        self.target.path()
    }

    /// The path routes match and `path` keys count: the canonical path without segment
    /// parameters.
    pub(crate) fn matched_path(&self) -> &str {
        self.matched_path.as_deref().unwrap_or(self.path())
    }

    pub(crate) fn query(&self) -> Option<&str> {
        self.target.query()
    }
}

/// Validates `raw` and puts it in canonical form.
/// An HTTP/2 request's `:scheme` (RFC 9113 §8.3.1): `http` or `https`, in any case.
fn check_scheme(uri: &http::Uri) -> Result<(), BadRequest> {
    match uri.scheme_str() {
        None => Ok(()),
        Some(scheme)
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            Ok(())
        }
        Some(other) => Err(BadRequest::Scheme(other.to_owned())),
    }
}

pub(crate) fn canonicalize(raw: ProxyRequest, policy: &Policy) -> Result<Request, BadRequest> {
    let ProxyRequest {
        method,
        uri,
        version,
        mut fields,
        upgrade,
        body,
    } = raw;
    check_method(&method, policy.allow_trace)?;
    if let Some(name) = fields.first_padded() {
        return Err(BadRequest::PaddedValue(name.to_owned()));
    }
    if let Some(codings) = fields.transfer_codings() {
        return Err(BadRequest::TransferCoding(codings));
    }
    if version == Version::HTTP_2 {
        check_scheme(&uri)?;
        fields.join_cookies();
    }
    // Read before the hop-by-hop fields go: the upgrade asked for is one of them.
    let protocols = wants_upgrade(&fields)
        .then(|| fields.value(&UPGRADE))
        .flatten();
    fields.strip_hop_by_hop();
    match policy.underscores {
        Underscores::Allow => {}
        Underscores::Drop => fields.drop_underscored(),
        Underscores::Reject => {
            if let Some(name) = fields.first_underscored() {
                return Err(BadRequest::Underscore(name));
            }
        }
    }
    let host = requested_host(&mut fields, &uri, version)?;
    let target = canonical_target(uri, policy.escaped_slashes)?;
    let matched_path = match path::without_parameters(target.path()) {
        std::borrow::Cow::Borrowed(_) => None,
        std::borrow::Cow::Owned(matched) => Some(matched.into_boxed_str()),
    };
    let trailers = || policy.trailers.clone();
    let body = match body {
        ArrivingBody::None => Either::Right(Empty::new()),
        ArrivingBody::Hyper(incoming) => {
            Either::Left(ClientBody::new(Either::Left(incoming), trailers()))
        }
        ArrivingBody::Http1(body) => Either::Left(ClientBody::new(Either::Right(body), trailers())),
    };
    Ok(Request {
        method,
        host,
        target,
        matched_path,
        fields,
        upgrade: protocols.map(|protocols| Upgrade {
            protocols,
            connection: upgrade,
        }),
        body,
    })
}

/// Upper-case letters, `_` and `-` only, as nginx accepts: `post` is not `POST` to a route,
/// and an upstream that upper-cases methods must not see it become one. TRACE only when
/// `allow_trace`.
fn check_method(method: &Method, allow_trace: bool) -> Result<(), BadRequest> {
    if method == Method::CONNECT {
        return Err(BadRequest::Connect);
    }
    if method == Method::TRACE && !allow_trace {
        return Err(BadRequest::Trace);
    }
    let text = method.as_str();
    let valid = text
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(BadRequest::Method(text.chars().take(32).collect()))
    }
}

/// The host asked for, taken out of `fields` (RFC 9112 §3.2, RFC 9113 §8.3.1): exactly one
/// valid Host in HTTP/1.1, at most one in HTTP/1.0; an absolute-form target's or HTTP/2's
/// authority wins, and an HTTP/2 Host must name the same host.
fn requested_host(
    fields: &mut RequestFields,
    uri: &Uri,
    version: Version,
) -> Result<Option<Host>, BadRequest> {
    let (count, field) = fields.take_host();
    if count > 1 {
        return Err(BadRequest::RepeatedHost);
    }
    let field = field.map(Host::of).transpose().map_err(BadRequest::Host)?;
    let authority = (uri.authority())
        .map(|authority| Host::of(Bytes::copy_from_slice(authority.as_str().as_bytes())))
        .transpose()
        .map_err(BadRequest::Host)?;
    match (version, authority, field) {
        (Version::HTTP_2, Some(authority), Some(field)) if authority.value != field.value => {
            Err(BadRequest::AuthorityMismatch)
        }
        (Version::HTTP_11, _, None) => Err(BadRequest::MissingHost),
        (Version::HTTP_2, None, None) => Err(BadRequest::MissingHost),
        (_, Some(authority), _) => Ok(Some(authority)),
        (_, None, field) => Ok(field),
    }
}

/// The canonical path and the query as sent, in origin form.
fn canonical_target(uri: Uri, slashes: EscapedSlashes) -> Result<PathAndQuery, BadRequest> {
    // An absolute-form target with an empty path asks for "/" (RFC 9112 §3.2.1); CONNECT's
    // authority-form has no scheme, and no path.
    let path = match uri.path() {
        "" if uri.scheme().is_some() => "/",
        path => path,
    };
    let normalized = path::normalize(path, slashes).map_err(BadRequest::Path)?;
    // The target as sent when it is already canonical: not when its path is empty
    // (`http://a.example?q`, whose `path()` reads "/"), which the upstream must get as "/".
    let sent_as_is = uri
        .path_and_query()
        .is_some_and(|sent| sent.as_str().starts_with('/'));
    let path = match normalized {
        Some(path) => path,
        None if sent_as_is && path.len() == uri.path().len() => {
            let as_sent = uri.into_parts().path_and_query;
            return as_sent.ok_or(BadRequest::Path(PathError::NotOriginForm));
        }
        None => path.to_owned(),
    };
    let text = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    PathAndQuery::from_maybe_shared(text).map_err(|_| BadRequest::Path(PathError::NotOriginForm))
}

#[cfg(test)]
mod tests;
