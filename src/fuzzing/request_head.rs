//! The own server's request head parser against hyper's HTTP/1 server on the same bytes: a
//! request served here is one hyper reads too, with the same method, target, version and
//! field lines; bytes the own server waits on are bytes hyper cannot read a request from.
//! What the own server leaves to hyper (a body, HTTP/1.0, an upgrade...) hyper answers as it
//! always did, so those bytes are not compared.

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;

use bytes::Bytes;
use http::{Method, Request, Response, Uri, Version};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

use super::runtime;
use crate::canonical::ProxyRequest;
use crate::server::{Parsed, parse_for_fuzzing};

/// A request head as read: its field names in lowercase, in order.
#[derive(Debug, PartialEq)]
struct Head {
    method: Method,
    target: Uri,
    version: Version,
    fields: Vec<(String, String)>,
}

pub fn request_head(bytes: &[u8]) {
    let own = parse_for_fuzzing(bytes);
    let hyper = read_by_hyper(bytes);
    match own {
        Parsed::Request(request) => {
            let Some(hyper) = hyper else {
                panic!("served here, refused by hyper: {:?}", own_head(&request));
            };
            assert_eq!(own_head(&request), hyper);
        }
        // The same httparse call decides, on the same bytes: RFC 9112 §2.2 lets a server
        // wait for the rest of a head, never act on part of one.
        Parsed::Partial => assert!(hyper.is_none(), "hyper read {hyper:?} from a partial head"),
        Parsed::Other => {}
    }
}

fn own_head(request: &ProxyRequest) -> Head {
    Head {
        method: request.method.clone(),
        target: request.uri.clone(),
        version: request.version,
        fields: in_name_order(request.fields.pairs()),
    }
}

/// The fields in order of name: the order of different names carries no meaning (RFC 9110
/// §5.3) and hyper's map does not keep it; a stable sort keeps each name's values in order.
fn in_name_order(mut fields: Vec<(String, String)>) -> Vec<(String, String)> {
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    fields
}

/// The first request hyper's HTTP/1 server hands its service from `bytes` followed by the
/// client's close; `None` when it hands none (it answered 400, 431, or saw the head cut).
fn read_by_hyper(bytes: &[u8]) -> Option<Head> {
    let seen: Rc<RefCell<Option<Head>>> = Rc::default();
    let service = {
        let seen = seen.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            seen.borrow_mut()
                .get_or_insert_with(|| hyper_head(&request));
            async { Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())) }
        })
    };
    runtime().block_on(async {
        // Room for every answer hyper writes: nobody reads them.
        let (mut client, server) = tokio::io::duplex(bytes.len() + 64 * 1024);
        client.write_all(bytes).await.expect("the pipe has room");
        client.shutdown().await.expect("the pipe is open");
        let connection = hyper::server::conn::http1::Builder::new()
            .header_read_timeout(None)
            .serve_connection(TokioIo::new(server), service);
        let _ = connection.await;
    });
    seen.take()
}

fn hyper_head(request: &Request<Incoming>) -> Head {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let fields = request
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), text(value.as_bytes())))
        .collect();
    Head {
        method: request.method().clone(),
        target: request.uri().clone(),
        version: request.version(),
        fields: in_name_order(fields),
    }
}
