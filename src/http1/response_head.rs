//! Message heads: the request head the gateway writes, the response head it reads, and how that
//! response's body is delimited (RFC 9112 §6).

use std::mem::MaybeUninit;

use bytes::{Buf, BytesMut};
use http::{Response, StatusCode, Version};

use super::fields::ReadFields;
use super::{ExchangeError, MAX_HEAD_BYTES, ResponseHead};
use crate::http1::framing::{Chunk, Framing};
use crate::proxy::headers::{Role, SetFields, role};
use crate::proxy::upstream::UpstreamHead;

/// Most fields in one response head.
const MAX_HEADERS: usize = 128;

/// The response head at the start of `buf`, taken off it once complete. Its end-to-end
/// fields are copied out as head lines (`UpstreamFields`), with no header map.
pub(super) fn parse_head(
    buf: &mut BytesMut,
    head_request: bool,
) -> Result<Option<ResponseHead>, ExchangeError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let length = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(length)) if length <= MAX_HEAD_BYTES => length,
        Ok(httparse::Status::Complete(_)) => return Err(ExchangeError::HeadTooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(ExchangeError::MalformedHead(error)),
    };
    let status = parsed
        .code
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(ExchangeError::Framing("status code out of range"))?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let mut response = Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = version;
    let head = read_fields(response, parsed.headers, head_request, length)?;
    buf.advance(length);
    Ok(Some(head))
}

/// The head of `response` with `fields`, which fill a head of `head_length` bytes.
fn read_fields(
    response: Response<()>,
    fields: &[httparse::Header<'_>],
    head_request: bool,
    head_length: usize,
) -> Result<ResponseHead, ExchangeError> {
    let read = ReadFields::of(response.status(), fields, head_length);
    let framing = response_framing(&response, head_request, &read)?;
    let keep_alive = read.connection.keeps_alive(response.version())
        && !matches!(framing, Framing::UntilClose | Framing::Upgraded);
    let mut kept = read.kept;
    if read.transfer_coding.is_none() {
        kept.set_content_length(read.content_length.ok().flatten());
    }
    Ok(ResponseHead {
        response,
        fields: kept,
        framing,
        keep_alive,
    })
}

/// Writes the request line, the request's fields less those `set` replaces, then `set`'s.
/// `length`: `None` for no body, `Some(None)` for a body of unknown length (chunked),
/// `Some(Some(n))` for `n` bytes.
pub(crate) fn encode_head(
    buf: &mut Vec<u8>,
    head: &UpstreamHead,
    set: &SetFields,
    length: Option<Option<u64>>,
) {
    buf.extend_from_slice(head.method.as_str().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(head.target.as_str().as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    set.encode_host(buf);
    let framed_here = length.is_some();
    let framing = |name: &[u8]| matches!(role(name), Role::ContentLength | Role::TransferEncoding);
    head.fields.encode(buf, |name| {
        !(set.leaves_out(name) || framed_here && framing(name))
    });
    set.encode(buf);
    match length {
        Some(Some(n)) => {
            buf.extend_from_slice(b"content-length: ");
            buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        Some(None) => buf.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        None => {}
    }
    buf.extend_from_slice(b"\r\n");
}

/// How the body of a response is delimited (RFC 9112 §6.3). Transfer-Encoding wins over
/// Content-Length, which the client then does not see.
fn response_framing(
    response: &Response<()>,
    head_request: bool,
    read: &ReadFields<'_>,
) -> Result<Framing, ExchangeError> {
    let status = response.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Framing::Upgraded);
    }
    if head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Done);
    }
    if let Some(coding) = read.transfer_coding {
        // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing; its
        // sender may mean something else by the bytes that follow (hyper refuses it too).
        if response.version() == Version::HTTP_10 {
            return Err(ExchangeError::Framing(
                "Transfer-Encoding in an HTTP/1.0 response",
            ));
        }
        return Ok(if coding.eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked(Chunk::Size)
        } else {
            Framing::UntilClose
        });
    }
    Ok(match read.content_length.map_err(ExchangeError::Framing)? {
        Some(0) => Framing::Done,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

#[cfg(test)]
mod tests;
