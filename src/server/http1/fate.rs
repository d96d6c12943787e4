//! What one request does to its connection: its body and a possible upgrade connected before
//! it is answered, whether the connection may stay open after the answer, and what becomes of
//! the connection once the answer is written.

use http::header::CONNECTION;
use http::{HeaderMap, Method, Response, StatusCode, Version};

use super::write::{AnswerTo, WriteError};
use super::{Answerer, ClientIo, Connection, Served};
use crate::http1::fields::lists;
use crate::http1::request_body::server_body;
use crate::http1::request_head::BodyLength;
use crate::http1::upgrade::{UpgradeSender, pending_upgrade};
use crate::request::canonical::{ArrivingBody, ProxyRequest};
use crate::response::ResponseBody;

impl<S: ClientIo> Connection<S> {
    /// Connects the request's body to the reading half and, for a request that may switch
    /// protocols, the connection to the tunnel; what the answer must know of the request.
    pub(super) fn connect(
        &mut self,
        request: &mut ProxyRequest,
        body: BodyLength,
        expects_continue: bool,
        asks_upgrade: bool,
        keep_alive: bool,
    ) -> (AnswerTo, Option<UpgradeSender>) {
        let answer_to = AnswerTo {
            keep_alive,
            head_only: request.method == Method::HEAD,
            http10: request.version == Version::HTTP_10,
            takes_trailers: false,
        };
        let length = match body {
            BodyLength::None => None,
            BodyLength::Exactly(n) => Some(Some(n)),
            BodyLength::Chunked => Some(None),
        };
        if let Some(length) = length {
            let (feed, body) = server_body(length);
            request.body = ArrivingBody::Http1(body);
            self.reader.feed_body(feed, length, expects_continue);
        }
        // Only a bodiless HTTP/1.1 request is switched: what follows its head belongs to the
        // new protocol, and HTTP/1.0 has no 1xx answers (RFC 9110 §15.2). Any other request
        // asking for an upgrade goes upstream as a plain one.
        let mut upgrade = None;
        if asks_upgrade && length.is_none() && !answer_to.http10 {
            let (sender, pending) = pending_upgrade();
            request.upgrade = Some(pending);
            upgrade = Some(sender);
        }
        (answer_to, upgrade)
    }

    /// Whether the connection may stay open after `response`, as far as is known before it is
    /// written.
    pub(super) fn connection_after(
        &mut self,
        response: &Response<ResponseBody>,
        mut answer_to: AnswerTo,
        stopping: bool,
    ) -> AnswerTo {
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            answer_to.keep_alive = true;
        } else {
            answer_to.keep_alive &= !stopping && !asks_to_close(response.headers());
            // A body still being read when the answer begins is not known to end where the
            // next request begins: the connection closes after the answer (unless the rest of
            // a body nobody reads is already here, and is skipped).
            answer_to.keep_alive &= self.reader.body_done();
        }
        answer_to
    }

    /// What becomes of the connection once the response was written (or not).
    pub(super) fn served(
        &mut self,
        written: Result<bool, WriteError>,
        upgrading: bool,
        upgrade: Option<UpgradeSender>,
        stopping: bool,
        answerer: &Answerer<'_>,
    ) -> Served {
        let peer = answerer.client.peer;
        let kept_alive = match written {
            Ok(kept_alive) => kept_alive,
            Err(WriteError::Stalled) => {
                tracing::debug!(%peer, "closing: the client took nothing sent to it within send_timeout");
                return Served::Abort;
            }
            Err(error) => {
                tracing::debug!(%peer, %error, "closing the connection");
                return Served::Close;
            }
        };
        if upgrading {
            return match upgrade {
                Some(sender) if sender.is_awaited() => Served::Upgrade(sender),
                _ => Served::Abort,
            };
        }
        if kept_alive && !stopping && self.reader.body_done() {
            Served::Next
        } else {
            Served::Close
        }
    }
}

/// A response that says the connection closes after it.
fn asks_to_close(headers: &HeaderMap) -> bool {
    headers
        .get_all(CONNECTION)
        .iter()
        .any(|value| lists(value.as_bytes(), b"close"))
}
