//! Sending the request: its head, then its body frame by frame in its framing, as the exchange
//! is polled. An upstream may answer before the whole body is sent; both go on together, and
//! a wait for more of the client's body is timed (`deadlines`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::HeaderMap;
use http_body::Body;
use tokio::io::AsyncWrite;

use super::super::exchange::{UpstreamBody, UpstreamHead};
use super::super::headers::SetFields;
use super::{Connection, ExchangeError, encode_field, hex};
use crate::http1::encode::encode_request_head;

#[derive(Debug)]
pub(super) enum Upload {
    Sending,
    Done,
    /// The upstream stopped taking the request body (it may still answer).
    Failed(io::Error),
}

impl Connection {
    /// Encodes the request head; the body goes out as the exchange is polled.
    pub(super) fn start(&mut self, head: &UpstreamHead, set: &SetFields, body: UpstreamBody) {
        let length = if body.is_end_stream() {
            None
        } else {
            Some(body.size_hint().exact())
        };
        self.write_buf.clear();
        self.written = 0;
        let (method, target, fields) = (&head.method, &head.target, &head.fields);
        encode_request_head(&mut self.write_buf, method, target, fields, set, length);
        self.flushed = false;
        self.chunked = matches!(length, Some(None));
        self.sent_body = length.is_some();
        self.body = length.is_some().then_some(body);
        self.upload = Upload::Sending;
    }

    /// Sends what it can of the request without waiting. A write failure does not end the
    /// exchange (the upstream may have answered early and stopped reading); the client's
    /// body failing does.
    pub(super) fn drive_upload(&mut self, cx: &mut Context<'_>) -> Result<(), ExchangeError> {
        if !matches!(self.upload, Upload::Sending) {
            return Ok(());
        }
        match self.poll_upload(cx) {
            Poll::Ready(Ok(())) => self.upload = Upload::Done,
            Poll::Ready(Err(ExchangeError::Io(error))) => {
                self.body = None;
                self.upload = Upload::Failed(error);
            }
            Poll::Ready(Err(error)) => {
                // The upstream got part of a body: the connection must not carry another.
                self.upload = Upload::Failed(io::Error::other("the client's body failed"));
                return Err(error);
            }
            Poll::Pending => {}
        }
        Ok(())
    }

    /// Writes the pending bytes, then the body frame by frame; ready once all is sent.
    fn poll_upload(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ExchangeError>> {
        loop {
            while self.written < self.write_buf.len() {
                let pending = &self.write_buf[self.written..];
                let n = ready!(Pin::new(&mut self.stream).poll_write(cx, pending))?;
                if n == 0 {
                    return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero).into()));
                }
                self.written += n;
            }
            self.write_buf.clear();
            self.written = 0;
            if !self.flushed {
                ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
                self.flushed = true;
            }
            let Some(body) = self.body.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            let Poll::Ready(frame) = Pin::new(body).poll_frame(cx) else {
                self.begin_upload_wait();
                return Poll::Pending;
            };
            self.upload_wait = None;
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.encode_data(&data),
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.encode_end(Some(&trailers));
                        }
                    }
                },
                Some(Err(error)) => {
                    self.body = None;
                    return Poll::Ready(Err(ExchangeError::ClientBody(error)));
                }
                None => self.encode_end(None),
            }
        }
    }

    fn encode_data(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.chunked {
            let mut size = [0u8; 16];
            self.write_buf.extend_from_slice(hex(data.len(), &mut size));
            self.write_buf.extend_from_slice(b"\r\n");
            self.write_buf.extend_from_slice(data);
            self.write_buf.extend_from_slice(b"\r\n");
        } else {
            self.write_buf.extend_from_slice(data);
        }
        self.flushed = false;
    }

    /// The body ended (with trailers, which only a chunked body can carry).
    fn encode_end(&mut self, trailers: Option<&HeaderMap>) {
        if self.chunked {
            self.write_buf.extend_from_slice(b"0\r\n");
            for (name, value) in trailers.into_iter().flatten() {
                encode_field(&mut self.write_buf, name.as_str(), value.as_bytes());
            }
            self.write_buf.extend_from_slice(b"\r\n");
            self.flushed = false;
        }
        self.body = None;
    }
}
