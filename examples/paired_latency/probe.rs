//! Sends the plan's requests on schedule over keep-alive connections and records each one's
//! latency from its scheduled instant. Every connection ("lane") owns a fixed set of instants,
//! so a slow answer delays only its lane's next requests, and that delay is measured.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::try_join_all;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Where one side of the pair sends its requests: a `GET` of the URL's path with its headers.
pub struct Endpoint {
    pub url: Uri,
    address: String,
    path: Uri,
    headers: HeaderMap,
}

impl Endpoint {
    pub fn new(url: &Uri, headers: &[(HeaderName, HeaderValue)]) -> Result<Endpoint, String> {
        if url.scheme_str() != Some("http") {
            return Err(format!("{url}: expected an http:// URL"));
        }
        let authority = url
            .authority()
            .ok_or_else(|| format!("{url}: expected a host"))?;
        let address = format!("{}:{}", authority.host(), url.port_u16().unwrap_or(80));
        let mut map = HeaderMap::new();
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|e| format!("{url}: host is not a header value: {e}"))?;
        map.insert(header::HOST, host);
        for (name, value) in headers {
            map.append(name.clone(), value.clone());
        }
        let path = url.path_and_query().map_or("/", |p| p.as_str());
        Ok(Endpoint {
            url: url.clone(),
            address,
            path: Uri::try_from(path).map_err(|e| format!("{url}: bad path: {e}"))?,
            headers: map,
        })
    }

    fn request(&self) -> Request<Empty<Bytes>> {
        let mut request = Request::new(Empty::new());
        *request.uri_mut() = self.path.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }

    fn request_error(&self, source: hyper::Error) -> ProbeError {
        ProbeError::Request {
            url: self.url.clone(),
            source,
        }
    }
}

/// What to send: TARGET at `rate` a second over `connections`, and DIRECT at every
/// `direct_every`-th of those instants.
pub struct Plan {
    pub target: Endpoint,
    pub direct: Endpoint,
    pub rate: u64,
    pub warmup_ticks: u64,
    pub measured_ticks: u64,
    pub connections: u32,
    pub direct_every: u32,
    /// How long one request may take, connecting included: a peer that stops answering
    /// fails the run instead of hanging it.
    pub timeout: Duration,
}

impl Plan {
    fn total_ticks(&self) -> u64 {
        self.warmup_ticks + self.measured_ticks
    }

    /// When the `tick`-th instant falls, counted from `start`.
    fn due(&self, start: Instant, tick: u64) -> Instant {
        let nanos = u128::from(tick) * 1_000_000_000 / u128::from(self.rate);
        start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    fn direct_connections(&self) -> u32 {
        (self.connections / self.direct_every).max(1)
    }
}

/// One measured request: the instant it was scheduled for, and the time from that instant to
/// the end of its answer.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub tick: u64,
    pub latency: Duration,
}

/// The measured requests of each side (the warm-up's are left out).
pub struct Samples {
    pub target: Vec<Sample>,
    pub direct: Vec<Sample>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: Uri,
        #[source]
        source: std::io::Error,
    },
    #[error("request to {url} failed: {source}")]
    Request {
        url: Uri,
        #[source]
        source: hyper::Error,
    },
    #[error("{url} answered {status}, expected 2xx: such a run measures something else")]
    Status { url: Uri, status: StatusCode },
    #[error("{url} did not answer within {timeout:?}")]
    Timeout { url: Uri, timeout: Duration },
}

/// A keep-alive connection and the instants it sends at: `first`, then every `stride`.
struct Lane<'a> {
    endpoint: &'a Endpoint,
    sender: SendRequest<Empty<Bytes>>,
    /// The last answer said `Connection: close`.
    closing: bool,
    first: u64,
    stride: u64,
}

/// Opens every connection, then sends the plan on schedule. The first failed request or answer
/// not 2xx ends the run with its error.
pub async fn run(plan: &Plan) -> Result<Samples, ProbeError> {
    let target_lanes = open_lanes(plan, &plan.target, plan.connections, 1).await?;
    let direct_lanes = open_lanes(
        plan,
        &plan.direct,
        plan.direct_connections(),
        plan.direct_every,
    )
    .await?;
    let start = Instant::now();
    let (target, direct) = futures_util::try_join!(
        drive_all(plan, start, target_lanes),
        drive_all(plan, start, direct_lanes)
    )?;
    Ok(Samples { target, direct })
}

/// `count` connections to `endpoint` that share every `every`-th instant between them, lane
/// `i` starting at instant `i × every`.
async fn open_lanes<'a>(
    plan: &Plan,
    endpoint: &'a Endpoint,
    count: u32,
    every: u32,
) -> Result<Vec<Lane<'a>>, ProbeError> {
    let (count, every) = (u64::from(count), u64::from(every));
    let mut lanes = Vec::new();
    for lane in 0..count {
        lanes.push(Lane {
            endpoint,
            sender: connect(plan, endpoint).await?,
            closing: false,
            first: lane * every,
            stride: count * every,
        });
    }
    Ok(lanes)
}

async fn drive_all(
    plan: &Plan,
    start: Instant,
    lanes: Vec<Lane<'_>>,
) -> Result<Vec<Sample>, ProbeError> {
    let per_lane = try_join_all(lanes.into_iter().map(|lane| lane.drive(plan, start))).await?;
    Ok(per_lane.into_iter().flatten().collect())
}

impl Lane<'_> {
    async fn drive(mut self, plan: &Plan, start: Instant) -> Result<Vec<Sample>, ProbeError> {
        let mut samples = Vec::new();
        let mut tick = self.first;
        while tick < plan.total_ticks() {
            let due = plan.due(start, tick);
            tokio::time::sleep_until(due).await;
            within(plan, self.endpoint, self.send(plan)).await?;
            if tick >= plan.warmup_ticks {
                samples.push(Sample {
                    tick,
                    latency: due.elapsed(),
                });
            }
            tick += self.stride;
        }
        Ok(samples)
    }

    /// One request, its whole answer read. A connection the server closed after its last
    /// answer (nginx does after `keepalive_requests`) is opened again first, as wrk and oha do;
    /// the time that takes counts in this request's latency.
    async fn send(&mut self, plan: &Plan) -> Result<(), ProbeError> {
        if self.closing || self.sender.is_closed() {
            self.sender = connect(plan, self.endpoint).await?;
            self.closing = false;
        }
        let error = |source| self.endpoint.request_error(source);
        self.sender.ready().await.map_err(error)?;
        let response = self
            .sender
            .send_request(self.endpoint.request())
            .await
            .map_err(error)?;
        let status = response.status();
        self.closing = response
            .headers()
            .get(header::CONNECTION)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"close"));
        response.into_body().collect().await.map_err(error)?;
        if !status.is_success() {
            return Err(ProbeError::Status {
                url: self.endpoint.url.clone(),
                status,
            });
        }
        Ok(())
    }
}

/// A keep-alive HTTP/1.1 connection to `endpoint`, opened within the plan's timeout.
async fn connect(
    plan: &Plan,
    endpoint: &Endpoint,
) -> Result<SendRequest<Empty<Bytes>>, ProbeError> {
    let connect_error = |source| ProbeError::Connect {
        url: endpoint.url.clone(),
        source,
    };
    let stream = within(plan, endpoint, async {
        TcpStream::connect(&endpoint.address)
            .await
            .map_err(connect_error)
    })
    .await?;
    stream.set_nodelay(true).map_err(connect_error)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| endpoint.request_error(source))?;
    // Ends when the sender is dropped or the server closes; a broken connection shows in the
    // next request.
    tokio::spawn(connection);
    Ok(sender)
}

/// `work` for `endpoint`, failed with `Timeout` after the plan's timeout: a peer that stops
/// answering ends the run instead of hanging it.
async fn within<T>(
    plan: &Plan,
    endpoint: &Endpoint,
    work: impl Future<Output = Result<T, ProbeError>>,
) -> Result<T, ProbeError> {
    tokio::time::timeout(plan.timeout, work)
        .await
        .map_err(|_| ProbeError::Timeout {
            url: endpoint.url.clone(),
            timeout: plan.timeout,
        })?
}
