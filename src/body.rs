//! The body of every response the gateway sends: streamed from an upstream or generated here,
//! optionally holding the route's in-flight slot until the body is finished or dropped (a
//! client that disconnects mid-stream frees its slot too).

use std::pin::Pin;
use std::task::{Context, Poll};

use crate::proxy::connections::PooledBody;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};

use crate::metrics::InFlightGauge;
use crate::route::InFlightSlot;

pub struct ResponseBody {
    inner: Either<PooledBody, Full<Bytes>>,
    _slot: Option<InFlightSlot>,
    _counted: Option<InFlightGauge>,
}

impl ResponseBody {
    pub fn upstream(body: PooledBody) -> ResponseBody {
        ResponseBody {
            inner: Either::Left(body),
            _slot: None,
            _counted: None,
        }
    }

    pub fn generated(bytes: Bytes) -> ResponseBody {
        ResponseBody {
            inner: Either::Right(Full::new(bytes)),
            _slot: None,
            _counted: None,
        }
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
