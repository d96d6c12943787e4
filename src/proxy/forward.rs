//! Sending one request to an upstream pool and bringing its response back, streaming both
//! bodies. A bodiless idempotent request whose connection was refused is retried once on
//! another server; a 101 answer turns the two connections into a byte tunnel.

use crate::rt::shortage::{Shortage, Site};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use futures_util::FutureExt;
use futures_util::future::Either as FutureEither;
use http::{Response, StatusCode};
use http_body_util::{Either, Empty};

use crate::http1::upgrade::PendingUpgrade;
use crate::metrics::Deadline;
use crate::request::canonical::{Host, Request, Upgrade, allowed_upgrade};
use crate::response::{GatewayError, ResponseBody};
use crate::upstream::connections::{PooledBody, SendError, may_send_again};
use crate::upstream::exchange::{UpstreamBody, UpstreamHead};
use crate::upstream::headers::{self, Forwarded, SetFields};
use crate::upstream::http1::ExchangeError;
use crate::upstream::pool::UpstreamPool;
use crate::upstream::tunnel::tunnel;

/// Forwards `request` to a server of `pool`, asked at `sent_at` (its first response
/// deadline counts from then: one clock reading for the deadline and the upstream's latency).
/// `upgrades` are the protocols its route lets it switch to; it is sent without the others.
/// `served_by` is set to the server that was tried last, for the access log.
///
/// The request is taken apart and its first attempt built before the returned future starts
/// (see `proxy::handle`): its parts live in that attempt only, not a second time in a state of
/// this function's own.
pub(super) fn forward<'r>(
    pool: &'r UpstreamPool,
    upgrades: &[String],
    request: Request,
    forwarded: &Forwarded<'_>,
    served_by: &mut Option<&'r str>,
    sent_at: Instant,
) -> impl Future<Output = Result<Response<ResponseBody>, GatewayError>> {
    let Request {
        method,
        host,
        target,
        fields,
        upgrade,
        body,
        ..
    } = request;
    // Offered upstream only when the client's connection can be switched: not for a request
    // with a body, an HTTP/1.0 one, or over HTTP/2 (the server then hands none over).
    let (protocols, client_upgrade) = match upgrade {
        Some(Upgrade {
            protocols,
            connection: Some(connection),
        }) => match allowed_upgrade(&protocols, upgrades) {
            Some(allowed) => (Some(allowed), Some(connection)),
            None => (None, None),
        },
        _ => (None, None),
    };
    let wants_upgrade = protocols.is_some();
    let host = host.map(Host::into_bytes);
    let set = headers::to_upstream(&fields, forwarded, host, protocols);
    let retryable = may_send_again(&method, &body, wants_upgrade);
    let head = UpstreamHead {
        method,
        target,
        fields,
    };
    // Only a retryable request needs its head kept for a second attempt; boxed, as the
    // attempt itself is.
    let retry =
        (retryable && pool.servers.len() > 1).then(|| Box::new((head.clone(), set.clone())));
    let Some(first) = pool.pick(None) else {
        return FutureEither::Left(std::future::ready(Err(no_healthy_server(pool))));
    };
    *served_by = Some(&pool.servers[first].label);
    let first_attempt = send(pool, first, (head, body), set, (sent_at, true));
    FutureEither::Right(Attempts {
        first_attempt,
        second_attempt: None,
        retry,
        first,
        pool,
        served_by,
        client_upgrade,
    })
}

/// What an attempt on one server gives.
type Attempted = Result<Response<PooledBody>, GatewayError>;

pin_project_lite::pin_project! {
    /// The first attempt, then at most one more on another server when the first could not
    /// connect. By hand, not `then` with an `async` block: the block (the first result, the
    /// retry, the upgrade) was moved into place after every first attempt, and whether that
    /// was inlined moved a request's cost from one build to the next (docs/PERFORMANCE.md,
    /// "Measured behind the code").
    struct Attempts<'r, 's, F> {
        #[pin]
        first_attempt: F,
        // Boxed, as rare: inline, a second attempt would double every request's future.
        second_attempt: Option<Pin<Box<dyn Future<Output = Attempted> + Send + 'r>>>,
        retry: Option<Box<(UpstreamHead, SetFields)>>,
        first: usize,
        pool: &'r UpstreamPool,
        served_by: &'s mut Option<&'r str>,
        client_upgrade: Option<PendingUpgrade>,
    }
}

impl<'r, F> Future for Attempts<'r, '_, F>
where
    F: Future<Output = Attempted> + Send + 'r,
{
    type Output = Result<Response<ResponseBody>, GatewayError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let result = loop {
            if let Some(second) = this.second_attempt {
                break ready!(second.as_mut().poll(cx));
            }
            match ready!(this.first_attempt.as_mut().poll(cx)) {
                Err(error) if error.is_connect_failure() => {
                    let pool: &'r UpstreamPool = this.pool;
                    let (Some(retry), Some(second)) =
                        (this.retry.take(), pool.pick(Some(*this.first)))
                    else {
                        break Err(error);
                    };
                    **this.served_by = Some(&pool.servers[second].label);
                    tracing::debug!(upstream = %pool.name, error = %error, "retrying on another server");
                    let (head, set) = *retry;
                    let body = Either::Right(Empty::new());
                    // No resend within it: a request is sent at most twice in all.
                    let attempt = send(pool, second, (head, body), set, (Instant::now(), false));
                    *this.second_attempt = Some(Box::pin(attempt));
                }
                other => break other,
            }
        };
        let upgrade = this.client_upgrade.take();
        let pool: &UpstreamPool = this.pool;
        Poll::Ready(result.map(|response| client_response(response, upgrade, pool)))
    }
}

/// One attempt on `server`, made at `sent_at`, that may send the request again on a new
/// connection if `may_resend`: the pool's exchange with its errors told apart for the client.
fn send(
    pool: &UpstreamPool,
    server: usize,
    request: (UpstreamHead, UpstreamBody),
    set: SetFields,
    (sent_at, may_resend): (Instant, bool),
) -> impl Future<Output = Attempted> + Send {
    let in_flight = pool.begin(server);
    let deadline = tokio::time::Instant::from_std(sent_at) + pool.response_timeout;
    pool.send(server, request, set, deadline, may_resend)
        .map(move |result| {
            drop(in_flight);
            let counters = &pool.client_deadlines.counters;
            let target = &pool.servers[server];
            let upstream = || pool.name.clone();
            let label = || target.label.clone();
            match result {
                Ok(response) => Ok(response),
                Err(SendError::Timeout) => {
                    counters.count(Deadline::UpstreamResponse);
                    Err(GatewayError::UpstreamTimeout {
                        upstream: upstream(),
                        server: label(),
                        after: pool.response_timeout,
                    })
                }
                Err(SendError::Connect(source)) => {
                    // The gateway's own shortage says nothing of the server: no ejection.
                    if let Some(resource) = Shortage::behind(source.as_ref()) {
                        resource.count(Site::UpstreamConnect);
                        return Err(GatewayError::LocalShortage {
                            upstream: upstream(),
                            server: label(),
                            resource,
                            source,
                        });
                    }
                    pool.eject(server);
                    if let Some(tls) = tls_error(source.as_ref()) {
                        Err(GatewayError::UpstreamTls {
                            upstream: upstream(),
                            server: label(),
                            reason: tls.to_string(),
                        })
                    } else if is_timeout(source.as_ref()) {
                        counters.count(Deadline::UpstreamConnect);
                        Err(GatewayError::UpstreamConnectTimeout {
                            upstream: upstream(),
                            server: label(),
                            after: pool.connect_timeout,
                        })
                    } else {
                        Err(GatewayError::UpstreamConnect {
                            upstream: upstream(),
                            server: label(),
                            source,
                        })
                    }
                }
                Err(SendError::Exchange(ExchangeError::ClientBody(source))) => {
                    Err(GatewayError::BadRequestBody(source))
                }
                Err(SendError::Exchange(ExchangeError::ClientBodyTimedOut(after))) => {
                    Err(GatewayError::RequestBodyTimeout { after })
                }
                Err(SendError::Exchange(source)) => Err(GatewayError::UpstreamFailed {
                    upstream: upstream(),
                    server: label(),
                    source,
                }),
            }
        })
}

/// The upstream response as the client gets it (its hop-by-hop fields were left out as its
/// head was read); a 101 starts the tunnel.
fn client_response(
    mut response: Response<PooledBody>,
    client_upgrade: Option<PendingUpgrade>,
    pool: &UpstreamPool,
) -> Response<ResponseBody> {
    if let Some(client) = client_upgrade
        && response.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(upstream) = response.body_mut().take_upgraded()
    {
        let deadlines = pool.client_deadlines.clone();
        let tunnels = deadlines.tunnels.clone();
        tunnels.spawn(tunnel(client, upstream, deadlines));
    }
    response.map(ResponseBody::upstream)
}

fn no_healthy_server(pool: &UpstreamPool) -> GatewayError {
    GatewayError::NoHealthyServer {
        upstream: pool.name.clone(),
    }
}

/// The TLS error behind a connect error, if the handshake is what failed.
fn tls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    causes(error).find_map(|cause| cause.downcast_ref::<rustls::Error>())
}

/// True when a connect error was a timeout rather than a refusal.
fn is_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    causes(error).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    })
}

/// An error and its causes. Connector errors arrive wrapped in (nested) io::Errors, whose
/// `source()` skips the wrapped error, so the walk also steps into them.
fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |current| {
        match current
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(wrapped) => Some(wrapped as &(dyn std::error::Error + 'static)),
            None => current.source(),
        }
    })
}
