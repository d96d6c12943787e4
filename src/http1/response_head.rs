//! Reading a response head off a connection's buffer (httparse, as hyper's client reads it):
//! the status, the end-to-end fields, how the body is delimited (RFC 9112 §6.3) and whether
//! the connection may carry another request (RFC 9112 §9.3). The fields go into the
//! recipient's own container (`ResponseFields`), filled as the head is read.

use std::mem::MaybeUninit;

use bytes::{Buf, BytesMut};
use http::{Response, StatusCode, Version};

use super::framing::{Chunk, Framing};
use fields::ReadFields;

mod fields;

/// Most fields in one response head.
const MAX_HEADERS: usize = 128;

/// Where a response's end-to-end fields are copied as its head is read: the recipient's own
/// container, filled in place (copying them into it afterwards would copy every field of
/// every response once more).
pub(crate) trait ResponseFields {
    /// Room for the fields of a head of `head_length` bytes.
    fn with_capacity(head_length: usize) -> Self;
    /// Appends a field: `name` is a token and `value` a valid field value, as httparse
    /// checks them.
    fn push(&mut self, name: &[u8], value: &[u8]);
    /// Keeps only the fields whose names `keep` accepts, in their order.
    fn retain(&mut self, keep: impl Fn(&[u8]) -> bool);
    /// The valid Content-Length passed on with the fields, when no Transfer-Encoding
    /// overrides it.
    fn set_content_length(&mut self, length: Option<u64>);
}

/// A response head, and how its body is read.
pub(crate) struct ResponseHead<F> {
    /// The status and version; its header map stays empty, the fields are in `fields`.
    pub response: Response<()>,
    pub fields: F,
    pub framing: Framing,
    /// The connection may carry another request once the body is read.
    pub keep_alive: bool,
}

/// Why a response head cannot be read; the connection it came on cannot be read any further.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResponseHeadError {
    #[error("malformed response head: {0}")]
    Malformed(httparse::Error),
    #[error("response head larger than {0} bytes")]
    TooLarge(usize),
    #[error("invalid response framing: {0}")]
    Framing(&'static str),
}

/// The response head at the start of `buf`, taken off it once complete, its end-to-end fields
/// copied into `F` (no header map). A complete head over `max_head` bytes is refused; one
/// still incomplete is the caller's to bound. `head_request`: the request was a `HEAD`.
/// Errors come as the caller's `E`, so that the head is returned in the caller's own result
/// (a conversion of the result after the call would move the head once more).
pub(crate) fn parse_response<F: ResponseFields, E: From<ResponseHeadError>>(
    buf: &mut BytesMut,
    head_request: bool,
    max_head: usize,
) -> Result<Option<ResponseHead<F>>, E> {
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
        Ok(httparse::Status::Complete(length)) if length <= max_head => length,
        Ok(httparse::Status::Complete(_)) => {
            return Err(ResponseHeadError::TooLarge(max_head).into());
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(ResponseHeadError::Malformed(error).into()),
    };
    let status = parsed
        .code
        // RFC 9110 §15: 100 to 599; a client treats others as a server error, so the client
        // gets a 502 rather than a status it cannot read (hyper passes 600 to 999 on).
        .filter(|code| *code <= 599)
        .and_then(|code| StatusCode::from_u16(code).ok())
        .ok_or(ResponseHeadError::Framing("status code out of range"))?;
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
fn read_fields<F: ResponseFields>(
    response: Response<()>,
    fields: &[httparse::Header<'_>],
    head_request: bool,
    head_length: usize,
) -> Result<ResponseHead<F>, ResponseHeadError> {
    let read = ReadFields::<F>::of(response.status(), fields, head_length);
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

/// How the body of a response is delimited (RFC 9112 §6.3). Transfer-Encoding wins over
/// Content-Length, which the client then does not see.
fn response_framing<F>(
    response: &Response<()>,
    head_request: bool,
    read: &ReadFields<'_, F>,
) -> Result<Framing, ResponseHeadError> {
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
            return Err(ResponseHeadError::Framing(
                "Transfer-Encoding in an HTTP/1.0 response",
            ));
        }
        // Only chunked is decoded here; a body under another coding (gzip, chunked) would
        // reach the client as if it had none, so it is refused (hyper passes it on).
        if read.other_coding {
            return Err(ResponseHeadError::Framing(
                "a transfer coding other than chunked",
            ));
        }
        return Ok(if coding.eq_ignore_ascii_case(b"chunked") {
            Framing::Chunked(Chunk::Size)
        } else {
            Framing::UntilClose
        });
    }
    let length = read.content_length.map_err(ResponseHeadError::Framing)?;
    Ok(match length {
        Some(0) => Framing::Done,
        Some(n) => Framing::Length(n),
        None => Framing::UntilClose,
    })
}

#[cfg(test)]
mod tests;
