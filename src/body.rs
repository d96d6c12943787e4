//! The body of every response the gateway sends: streamed from an upstream or generated here,
//! optionally holding the route's in-flight slot until the body is finished or dropped (a
//! client that disconnects mid-stream frees its slot too).

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::proxy::connections::PooledBody;
use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};

use crate::added_fields::AddedFields;
use crate::metrics::InFlightGauge;
use crate::route::InFlightSlot;
use crate::upstream_fields::UpstreamFields;

pub struct ResponseBody {
    inner: Either<PooledBody, Full<Bytes>>,
    /// Fields for the head, kept apart from the header map until the head is written (see
    /// `added_fields`).
    added: AddedFields,
    _slot: Option<InFlightSlot>,
    _counted: Option<InFlightGauge>,
}

impl ResponseBody {
    pub fn upstream(body: PooledBody) -> ResponseBody {
        ResponseBody {
            inner: Either::Left(body),
            added: AddedFields::default(),
            _slot: None,
            _counted: None,
        }
    }

    pub fn generated(bytes: Bytes) -> ResponseBody {
        ResponseBody {
            inner: Either::Right(Full::new(bytes)),
            added: AddedFields::default(),
            _slot: None,
            _counted: None,
        }
    }

    pub fn added(&self) -> &AddedFields {
        &self.added
    }

    pub fn added_mut(&mut self) -> &mut AddedFields {
        &mut self.added
    }

    /// An upstream response's fields, which its header map does not hold.
    pub fn upstream_fields(&self) -> Option<&UpstreamFields> {
        match &self.inner {
            Either::Left(upstream) => Some(upstream.fields()),
            Either::Right(_) => None,
        }
    }

    /// The response with its upstream's fields, then its added ones, moved into its header
    /// map, for a server that writes heads from the map alone (hyper).
    pub fn with_fields_in_headers(response: Response<ResponseBody>) -> Response<ResponseBody> {
        let (mut parts, mut body) = response.into_parts();
        if let Either::Left(upstream) = &mut body.inner {
            upstream.fields_mut().move_into(&mut parts.headers);
        }
        body.added.move_into(&mut parts.headers);
        Response::from_parts(parts, body)
    }

    /// Keeps `slot` taken and the request counted in flight until this body is done.
    pub fn holding(mut self, slot: Option<InFlightSlot>, counted: InFlightGauge) -> ResponseBody {
        self._slot = slot;
        self._counted = Some(counted);
        self
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
