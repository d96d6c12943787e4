//! The connection hyper serves once the own HTTP/1 server hands it over: hyper-util's auto
//! server (HTTP/1.1, or HTTP/2 when the bytes start with its preface) at a connection's start,
//! hyper's HTTP/1 server alone afterwards. RFC 9113 §3.4 recognises the preface as the first
//! bytes of a connection only; the auto server would take it after a request too (its
//! `http1_only` does nothing for connections with upgrades), and the HTTP/2 requests that then
//! followed were served on what had been an HTTP/1.1 connection.

use std::error::Error;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::convert::Infallible;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::rt::{Read, Write};
use hyper::server::conn::http1;
use hyper::service::{HttpService, Service};

use super::served_body::ServedBody;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;

type BoxError = Box<dyn Error + Send + Sync>;

pin_project_lite::pin_project! {
    /// One served connection, by either server.
    #[project = Serving]
    pub(super) enum HyperConnection<'b, I, S>
    where
        S: HttpService<Incoming>,
    {
        Auto { #[pin] connection: auto::UpgradeableConnection<'b, I, S, TokioExecutor> },
        Http1 { #[pin] connection: http1::UpgradeableConnection<I, S> },
    }
}

/// The two servers' settings.
pub struct HyperServers {
    pub auto: auto::Builder<TokioExecutor>,
    pub http1: http1::Builder,
}

impl HyperServers {
    /// Serves `io` with `service`: by the auto server when the connection is `at_start` and may
    /// speak HTTP/2, else by the HTTP/1 server.
    pub(super) fn serve<I, S>(
        &self,
        io: I,
        service: S,
        http2_allowed: bool,
    ) -> HyperConnection<'_, I, S>
    where
        S: Service<Request<Incoming>, Response = Response<ServedBody>, Error = Infallible>
            + Send
            + 'static,
        S::Future: Send + 'static,
        I: Read + Write + Unpin + Send + 'static,
    {
        if http2_allowed {
            HyperConnection::Auto {
                connection: self.auto.serve_connection_with_upgrades(io, service),
            }
        } else {
            HyperConnection::Http1 {
                connection: self.http1.serve_connection(io, service).with_upgrades(),
            }
        }
    }
}

impl<I, S> HyperConnection<'_, I, S>
where
    S: Service<Request<Incoming>, Response = Response<ServedBody>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
    I: Read + Write + Unpin + Send + 'static,
{
    /// Finishes the requests in flight, then closes.
    pub(super) fn graceful_shutdown(self: Pin<&mut Self>) {
        match self.project() {
            Serving::Auto { connection } => connection.graceful_shutdown(),
            Serving::Http1 { connection } => connection.graceful_shutdown(),
        }
    }
}

impl<I, S> Future for HyperConnection<'_, I, S>
where
    S: Service<Request<Incoming>, Response = Response<ServedBody>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
    I: Read + Write + Unpin + Send + 'static,
{
    type Output = Result<(), BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Serving::Auto { connection } => connection.poll(cx),
            Serving::Http1 { connection } => connection.poll(cx).map_err(Into::into),
        }
    }
}
