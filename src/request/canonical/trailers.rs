//! Request trailers (RFC 9110 §6.5): a client's body may end with fields. None that the gateway
//! judges in a head crosses it as a trailer, or an upstream that merges trailers into the head
//! (RFC 9110 §6.5.2 allows it) would act on a Host, a key or a framing field nobody checked.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{HeaderMap, HeaderName};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Either;
use hyper::body::Incoming;

use super::Underscores;
use crate::http1::fields::{Role, role};
use crate::http1::request_body::{BoxError, ServerBody};

/// Fields never forwarded as trailers besides the hop-by-hop and framing ones: those the
/// gateway reads (Host, forwarding, request id), credentials and cookies (often keys), and the
/// names the config's limits and plans read.
const ALWAYS_JUDGED: &[&str] = &[
    "authorization",
    "cookie",
    "expect",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "x-request-id",
];

/// Which trailer names may be forwarded; built once per config.
#[derive(Debug, Clone)]
pub(crate) struct TrailerFilter {
    /// Header names the config's limits and plans key on.
    keys: Vec<HeaderName>,
    underscores: Underscores,
}

impl TrailerFilter {
    pub(crate) fn new(keys: Vec<HeaderName>, underscores: Underscores) -> TrailerFilter {
        TrailerFilter { keys, underscores }
    }

    /// Whether a trailer called `name` may reach the upstream.
    pub(crate) fn forwards(&self, name: &HeaderName) -> bool {
        let text = name.as_str();
        matches!(role(text.as_bytes()), Role::EndToEnd)
            && !ALWAYS_JUDGED.contains(&text)
            && !self.keys.contains(name)
            && (self.underscores == Underscores::Allow || !text.contains('_'))
    }

    fn filter(&self, trailers: HeaderMap) -> HeaderMap {
        if trailers.keys().all(|name| self.forwards(name)) {
            return trailers;
        }
        let mut kept = HeaderMap::new();
        let mut current = None;
        for (name, value) in trailers {
            if let Some(name) = name {
                current = self.forwards(&name).then_some(name);
            }
            if let Some(name) = &current {
                kept.append(name.clone(), value);
            }
        }
        kept
    }
}

pin_project_lite::pin_project! {
    /// A client's streamed request body whose trailers are filtered on the way through.
    pub struct ClientBody {
        #[pin]
        inner: Either<Incoming, ServerBody>,
        filter: Arc<TrailerFilter>,
    }
}

impl ClientBody {
    pub(crate) fn new(
        inner: Either<Incoming, ServerBody>,
        filter: Arc<TrailerFilter>,
    ) -> ClientBody {
        ClientBody { inner, filter }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        loop {
            let frame = match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                other => return Poll::Ready(other),
            };
            match frame.into_trailers() {
                Ok(trailers) => {
                    let kept = this.filter.filter(trailers);
                    if !kept.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::trailers(kept))));
                    }
                }
                Err(data) => return Poll::Ready(Some(Ok(data))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judged_framing_hop_by_hop_key_and_underscored_trailers_are_dropped() {
        let filter = TrailerFilter::new(
            vec![HeaderName::from_static("x-api-key")],
            Underscores::Drop,
        );
        let mut trailers = HeaderMap::new();
        for (name, value) in [
            ("host", "evil.example"),
            ("content-length", "5"),
            ("transfer-encoding", "chunked"),
            ("connection", "close"),
            ("x-api-key", "other"),
            ("x-forwarded-for", "1.2.3.4"),
            ("x_api_key", "x"),
            ("cookie", "a=b"),
            ("x-checksum", "abc"),
            ("grpc-status", "0"),
        ] {
            trailers.append(HeaderName::from_static(name), value.parse().unwrap());
        }
        let kept = filter.filter(trailers);
        let names: Vec<&str> = kept.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-checksum", "grpc-status"]);
        let allowing = TrailerFilter::new(Vec::new(), Underscores::Allow);
        assert!(allowing.forwards(&HeaderName::from_static("x_sum")));
    }
}
