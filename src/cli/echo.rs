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

/// What a bodiless request showed the upstream. A struct, not a `json!` map: the map's
/// allocations made the load scripts' upstream pay for each forwarded field it reports, and
/// a proxy that forwards more fields (ours sets X-Forwarded-Proto/-Host and X-Request-Id)
/// then looked slower. Fields in the order the map wrote its sorted keys.
#[derive(serde::Serialize)]
struct Description<'a> {
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    x_forwarded_for: Option<&'a str>,
    x_forwarded_host: Option<&'a str>,
    x_forwarded_proto: Option<&'a str>,
    x_request_id: Option<&'a str>,
}

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
    let description = Description {
        method: request.method().as_str(),
        path: request.uri().path(),
        query: request.uri().query(),
        x_forwarded_for: seen("x-forwarded-for"),
        x_forwarded_host: seen("x-forwarded-host"),
        x_forwarded_proto: seen("x-forwarded-proto"),
        x_request_id: seen("x-request-id"),
    };
    let mut body = serde_json::to_vec(&description).unwrap_or_default();
    body.push(b'\n');
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Sends `request` (asking to close) to a new echo upstream; its answer's head and body.
    async fn exchange(request: &str) -> (String, String) {
        let address = spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        (head.to_ascii_lowercase(), body.to_owned())
    }

    #[tokio::test]
    async fn a_bodiless_request_is_described_as_json() {
        let (head, body) = exchange(
            "GET /v1/things?page=2 HTTP/1.1\r\nHost: gw\r\nX-Forwarded-For: 203.0.113.9\r\n\
             X-Forwarded-Host: api \"quoted\" \\ host\r\nX-Request-Id: id-1\r\n\
             Connection: close\r\n\r\n",
        )
        .await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(body.ends_with('\n'), "{body:?}");
        let description: serde_json::Value = serde_json::from_str(&body).unwrap();
        let expected = serde_json::json!({
            "method": "GET",
            "path": "/v1/things",
            "query": "page=2",
            "x_forwarded_for": "203.0.113.9",
            "x_forwarded_host": "api \"quoted\" \\ host",
            "x_forwarded_proto": null,
            "x_request_id": "id-1",
        });
        assert_eq!(description, expected);
    }

    #[tokio::test]
    async fn a_body_comes_back_as_it_was_sent() {
        let (head, body) = exchange(
            "POST /upload HTTP/1.1\r\nHost: gw\r\nContent-Type: text/plain\r\n\
             Content-Length: 11\r\nConnection: close\r\n\r\nhello world",
        )
        .await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("content-type: text/plain"), "{head}");
        assert_eq!(body, "hello world");
    }
}
