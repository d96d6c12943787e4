//! The request pipeline of docs/ARCHITECTURE.md, read top to bottom in `proxy`: request id →
//! header size → canonical request → client ip → route → ip lists, edge and limits → forward
//! → respond, then `record`. Each step lives in its own module. The pipeline decides, then
//! acts, then records: refusals come back as values that `respond` turns into answers, and
//! what a request went through is recorded once, when it is answered (`record.rs`).

mod forward;
pub(crate) mod record;

use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Response};

use crate::admission::admit::{Admission, Asker};
use crate::fields::added::Added;
use crate::limit::charge::{Answer, AnsweredBy};
use crate::request::canonical::ProxyRequest;
use crate::request::canonical::{self, Host, Request};
use crate::request::id::{self, RequestId};
use crate::request::route::{Route, Router};
use crate::response::{self, GatewayError, ResponseBody};
use crate::runtime::Runtime;
use crate::upstream::headers::Forwarded;
use record::RequestLog;

/// The client side of a connection, as the pipeline sees it.
#[derive(Debug, Clone)]
pub(crate) struct ClientConnection {
    /// As the socket reports it: a dual-stack listener's IPv4 peers are IPv4-mapped.
    pub peer: SocketAddr,
    /// `"http"` or `"https"`, for X-Forwarded-Proto.
    pub proto: &'static str,
    /// The peer's address as X-Forwarded-For gets it, formatted once per connection.
    pub peer_header: HeaderValue,
}

impl ClientConnection {
    pub(crate) fn new(peer: SocketAddr, proto: &'static str) -> ClientConnection {
        let address = canonical_ip(peer).to_string();
        let peer_header =
            HeaderValue::from_str(&address).unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        ClientConnection {
            peer,
            proto,
            peer_header,
        }
    }

    /// The peer's address in its one form, as the limiter counts it, the log and the upstream's
    /// fields name it: `::ffff:192.0.2.1` (a dual-stack listener's IPv4 peer) is `192.0.2.1`.
    pub(crate) fn peer_ip(&self) -> IpAddr {
        canonical_ip(self.peer)
    }
}

fn canonical_ip(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

/// Answers one request. Never fails: errors become problem+json answers here.
///
/// A plain fn returning an `async move` block, as are the functions it awaits on the way to
/// the upstream: an `async fn` copies each argument into a local of its state, so the request
/// was held twice at every level, and a request's whole state is copied each time it moves
/// (by hyper into its slot, by every caller into its own). For the same reason a future is
/// never captured by a block that then awaits it (held twice: captured and awaited); such
/// callers `map` or `then` it instead.
#[expect(clippy::manual_async_fn)]
pub(crate) fn handle(
    runtime: Arc<Runtime>,
    client: ClientConnection,
    request: ProxyRequest,
) -> impl Future<Output = Response<ResponseBody>> {
    async move {
        let (runtime, client) = (&*runtime, &client);
        let started = Instant::now();
        let request_id = id::keep_or_mint(&request.fields);
        let mut log = RequestLog::new(runtime);
        // Pinned where it is made: `.await` on the call itself moved the whole future (room
        // for every one of its states, a memcpy) into place first (docs/PERFORMANCE.md,
        // "Measured behind the code").
        let proxied = pin!(proxy(runtime, client, request, &request_id, &mut log)).await;
        let mut response = match proxied {
            Ok(response) => response,
            Err(error) => response::error_response(&error, &request_id),
        };
        // The request's outcome, recorded once: metrics, what admission saw, the access line.
        log.record(client, &request_id, response.status().as_u16(), started);
        let added = response.body_mut().added_mut();
        added.add_composed(Added::RequestId, |out| {
            out.extend_from_slice(request_id.as_bytes())
        });
        response
    }
}

// An `async move` block, not an `async fn`: see `proxy::handle`.
#[expect(clippy::manual_async_fn)]
fn proxy<'r>(
    runtime: &'r Runtime,
    client: &'r ClientConnection,
    request: ProxyRequest,
    request_id: &RequestId,
    log: &mut RequestLog<'r>,
) -> impl Future<Output = Result<Response<ResponseBody>, GatewayError>> {
    async move {
        check_header_size(&request, runtime.max_header_bytes)?;
        if runtime.access_log {
            log.line = Some((request.method.clone(), request.uri.path().to_owned()));
        }
        let request = canonical::canonicalize(request, &runtime.canonical)?;
        if let Some((_, path)) = &mut log.line
            && path != request.path()
        {
            request.path().clone_into(path);
        }
        let client_ip = runtime.client_ip.resolve(client.peer_ip(), &request.fields);
        log.client_ip = Some(client_ip.ip);
        let route = route_of(&runtime.router, &request)?;
        log.route = Some(&route.name);
        let route_metrics = &runtime.route_metrics[route.index];
        log.route_metrics = Some(route_metrics);
        let counted = route_metrics.enter();
        let asker = Asker {
            client: client_ip,
            grouped: runtime.client_ip.group(client_ip.ip),
            // One clock read per request, shared by every layer.
            now: runtime.clock.now(),
        };
        let seen = &mut log.admission;
        let gate = runtime.gate();
        let (slot, statuses, reservations) =
            match pin!(gate.admit(route, &request, asker, seen)).await {
                Admission::Refused { refusal, by } => {
                    log.refused_by = by;
                    let style = &runtime.response;
                    return Ok(response::refusal_response(refusal, style, request_id));
                }
                Admission::Admitted {
                    slot,
                    statuses,
                    delay,
                    reservations,
                } => {
                    if !reservations.is_empty() {
                        runtime.settler.reserved(&reservations);
                    }
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    (slot, statuses, reservations)
                }
            };
        log.remaining = statuses.first().map(|s| s.remaining);
        let forwarded = Forwarded {
            peer: &client.peer_header,
            peer_trusted: client_ip.peer_trusted,
            client_ip: client_ip.ip,
            client_fields: &runtime.client_fields,
            proto: client.proto,
            request_id,
            plain_answer: !reservations.is_empty() && runtime.settler.reads_body(&reservations),
        };
        let upstream = &runtime.upstreams[route.upstream];
        let asked = Instant::now();
        let served_by = &mut log.upstream;
        let upstream_answer = pin!(forward::forward(
            upstream,
            &route.upgrades,
            request,
            &forwarded,
            served_by,
            asked
        ))
        .await;
        // Read before the answer is taken apart; only a request that reserved needs it.
        let answer = (!reservations.is_empty()).then(|| answer_of(&upstream_answer));
        let mut response = match upstream_answer {
            Ok(response) => response,
            Err(error) => response::error_response(&error, request_id),
        };
        if let Some(answer) = answer {
            let settler = &runtime.settler;
            let at_head = settler.at_head(reservations, answer, &mut response, request_id.as_str());
            log.settled = Some(at_head);
        }
        log.answered = Some(Instant::now());
        log.upstream_call = Some((&runtime.upstream_metrics[route.upstream], asked));
        response::add_rate_fields(
            response.body_mut().added_mut(),
            &statuses,
            &runtime.response,
        );
        response.body_mut().hold(slot, counted);
        Ok(response)
    }
}

/// What settling needs to know of the upstream's answer, or of the error in its place.
fn answer_of(answered: &Result<Response<ResponseBody>, GatewayError>) -> Answer {
    match answered {
        Ok(response) => Answer {
            status: response.status().as_u16(),
            from: AnsweredBy::Upstream,
        },
        Err(error) => Answer {
            status: error.status().as_u16(),
            from: error.answered_by(),
        },
    }
}

/// The first route matching the canonical request.
fn route_of<'r>(router: &'r Router, request: &Request) -> Result<&'r Route, GatewayError> {
    let host = request.host.as_ref().map(Host::name);
    let found = router.find(host, request.matched_path(), &request.method);
    found.ok_or_else(|| GatewayError::NoRoute {
        method: request.method.clone(),
        path: request.path().to_string(),
    })
}

/// Enforces `max_header_bytes` on the request line and headers together. hyper's own buffer
/// limit (set larger) stops anything far beyond it before it is parsed.
fn check_header_size(request: &ProxyRequest, limit: usize) -> Result<(), GatewayError> {
    let line = request.method.as_str().len()
        + request.uri.path_and_query().map_or(1, |p| p.as_str().len())
        + 12;
    if line + request.fields.encoded_size() > limit {
        return Err(GatewayError::HeadersTooLarge { limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_mapped_peer_is_its_ipv4_address_in_every_field_made_from_it() {
        let mapped: SocketAddr = "[::ffff:192.0.2.1]:4000".parse().unwrap();
        let client = ClientConnection::new(mapped, "http");
        assert_eq!(client.peer_header, "192.0.2.1");
        assert_eq!(client.peer_ip(), IpAddr::from([192, 0, 2, 1]));
        let v6: SocketAddr = "[2001:db8::7]:4000".parse().unwrap();
        assert_eq!(ClientConnection::new(v6, "http").peer_header, "2001:db8::7");
    }
}
