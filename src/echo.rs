//! A small echo upstream: the upstream of `ratelimit-proxy demo` and of the load scripts.
//! A request with a body gets it streamed back; one without gets a JSON description of what
//! the upstream saw (method, path, forwarded headers), so a newcomer can see the proxy at work.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, header};
use http_body::Body as _;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

type EchoBody = Either<Incoming, Full<Bytes>>;

/// Serves echo answers on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "echo upstream: accept failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(|request| async move { Ok::<_, Infallible>(answer(request)) });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Binds `addr` and serves echo answers in a background task; returns the bound address.
pub async fn spawn(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(serve(listener, std::future::pending()));
    Ok(local)
}

fn answer(request: Request<Incoming>) -> Response<EchoBody> {
    if !request.body().is_end_stream() {
        let content_type = request.headers().get(header::CONTENT_TYPE).cloned();
        let mut response = Response::new(Either::Left(request.into_body()));
        if let Some(content_type) = content_type {
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, content_type);
        }
        return response;
    }
    let seen = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
    let description = serde_json::json!({
        "method": request.method().as_str(),
        "path": request.uri().path(),
        "query": request.uri().query(),
        "x_forwarded_for": seen("x-forwarded-for"),
        "x_forwarded_proto": seen("x-forwarded-proto"),
        "x_forwarded_host": seen("x-forwarded-host"),
        "x_request_id": seen("x-request-id"),
    });
    let mut body = serde_json::to_vec(&description).unwrap_or_default();
    body.push(b'\n');
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
