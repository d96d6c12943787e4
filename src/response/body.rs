//! The body of every response the gateway sends: streamed from an upstream or generated here,
//! optionally holding the route's in-flight slot until the body is finished or dropped (a
//! client that disconnects mid-stream frees its slot too).

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::upstream::connections::PooledBody;
use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;

use crate::fields::added::AddedFields;
use crate::fields::upstream::UpstreamFields;
use crate::metrics::InFlightGauge;
use crate::request::route::InFlightSlot;

/// The content type of every problem answer the gateway generates (RFC 9457).
const PROBLEM_JSON: &str = "application/problem+json";

pub(crate) struct ResponseBody {
    inner: Source,
    /// Fields for the head, kept apart from the header map until the head is written (see
    /// `added_fields`).
    added: AddedFields,
    _slot: Option<InFlightSlot>,
    _counted: Option<InFlightGauge>,
    /// Shown the upstream body's bytes as they pass, and told when it ended whole (a limit
    /// that settles by the body's usage). Dropped unfinished when the body is.
    /// Boxed twice: one pointer, not two, in every response's body (which is moved as
    /// the answer is written), for what few answers have.
    watcher: Option<Box<Box<dyn BodyWatcher>>>,
}

/// Watches an upstream body go by, without holding or delaying it.
pub(crate) trait BodyWatcher: Send + Sync {
    /// The body's next bytes, as they are forwarded.
    fn feed(&mut self, chunk: &[u8]);
    /// The body ended whole. A watcher dropped without this saw an incomplete body.
    fn ended(self: Box<Self>);
}

enum Source {
    Upstream(PooledBody),
    /// Made here. A problem's `Content-Type` goes into the head with the added fields, not
    /// into the header map: inserting it cost a denial the map's allocations and the lookups
    /// the head's writer makes in a map that is not empty (docs/PERFORMANCE.md, "Measured
    /// behind the code").
    Generated {
        bytes: Full<Bytes>,
        problem: bool,
    },
}

impl ResponseBody {
    pub(crate) fn upstream(body: PooledBody) -> ResponseBody {
        ResponseBody {
            inner: Source::Upstream(body),
            added: AddedFields::default(),
            _slot: None,
            _counted: None,
            watcher: None,
        }
    }

    /// A body made here that is not a problem: in service every answer the gateway makes is
    /// one, so only tests make these (heads with a content type of their own).
    #[cfg(test)]
    pub(crate) fn generated(bytes: Bytes) -> ResponseBody {
        ResponseBody::made_here(bytes, false)
    }

    /// An `application/problem+json` body.
    pub(crate) fn problem(bytes: Bytes) -> ResponseBody {
        ResponseBody::made_here(bytes, true)
    }

    fn made_here(bytes: Bytes, problem: bool) -> ResponseBody {
        ResponseBody {
            inner: Source::Generated {
                bytes: Full::new(bytes),
                problem,
            },
            added: AddedFields::default(),
            _slot: None,
            _counted: None,
            watcher: None,
        }
    }

    /// The content type the body sets itself (a problem's), written with the head.
    pub(crate) fn content_type(&self) -> Option<&'static str> {
        match self.inner {
            Source::Generated { problem: true, .. } => Some(PROBLEM_JSON),
            _ => None,
        }
    }

    pub(crate) fn added(&self) -> &AddedFields {
        &self.added
    }

    pub(crate) fn added_mut(&mut self) -> &mut AddedFields {
        &mut self.added
    }

    /// An upstream response's fields, which its header map does not hold.
    pub(crate) fn upstream_fields(&self) -> Option<&UpstreamFields> {
        match &self.inner {
            Source::Upstream(upstream) => Some(upstream.fields()),
            Source::Generated { .. } => None,
        }
    }

    /// The response with its upstream's fields or its own content type, then its added
    /// fields, moved into its header map, for a server that writes heads from the map alone
    /// (hyper).
    pub(crate) fn with_fields_in_headers(
        response: Response<ResponseBody>,
    ) -> Response<ResponseBody> {
        let (mut parts, mut body) = response.into_parts();
        if let Source::Upstream(upstream) = &mut body.inner {
            upstream.fields_mut().move_into(&mut parts.headers);
        }
        if let Some(content_type) = body.content_type() {
            let value = HeaderValue::from_static(content_type);
            parts.headers.insert(header::CONTENT_TYPE, value);
        }
        body.added.move_into(&mut parts.headers);
        Response::from_parts(parts, body)
    }

    /// Keeps `slot` taken and the request counted in flight until this body is done. In
    /// place: rebuilding a response around a body that took them moved both, on every request
    /// (docs/PERFORMANCE.md, "Measured behind the code").
    pub(crate) fn hold(&mut self, slot: Option<InFlightSlot>, counted: InFlightGauge) {
        self._slot = slot;
        self._counted = Some(counted);
    }
}

impl ResponseBody {
    /// Shows the upstream body to `watcher` as it passes (a body made here has no usage).
    pub(crate) fn watch(&mut self, watcher: Box<dyn BodyWatcher>) {
        if matches!(self.inner, Source::Upstream(_)) {
            self.watcher = Some(Box::new(watcher));
        }
    }
}

/// Shows a polled frame to the watcher, and tells it when the body ended whole: at its last
/// frame (a server stops polling a body that says it has ended) or when there are no more.
fn watch_frame<E>(
    watcher: &mut Option<Box<Box<dyn BodyWatcher>>>,
    body: &PooledBody,
    polled: &Poll<Option<Result<Frame<Bytes>, E>>>,
) {
    let Some(watching) = watcher else {
        return;
    };
    let ended = match polled {
        Poll::Pending => return,
        Poll::Ready(Some(Ok(frame))) => {
            if let Some(data) = frame.data_ref() {
                watching.feed(data);
            }
            body.is_end_stream()
        }
        Poll::Ready(None) => true,
        Poll::Ready(Some(Err(_))) => {
            // Incomplete: dropped unfinished.
            *watcher = None;
            return;
        }
    };
    if ended && let Some(watching) = watcher.take() {
        watching.ended();
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match &mut this.inner {
            Source::Upstream(body) => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                if this.watcher.is_some() {
                    watch_frame(&mut this.watcher, body, &polled);
                }
                polled.map_err(Into::into)
            }
            Source::Generated { bytes, .. } => Pin::new(bytes)
                .poll_frame(cx)
                .map_err(|never| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Source::Upstream(body) => body.is_end_stream(),
            Source::Generated { bytes, .. } => bytes.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Source::Upstream(body) => body.size_hint(),
            Source::Generated { bytes, .. } => bytes.size_hint(),
        }
    }
}
