//! Why an exchange with an upstream server fails: the connection, the response head and body
//! as the client reads them, and the deadlines.

use std::io;

use super::{MAX_HEAD_BYTES, MAX_INTERIM};
use crate::http1::framing::FramingError;
use crate::http1::response_head::ResponseHeadError;

/// Why an exchange with an upstream server failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    #[error("the connection closed before a complete response head")]
    Closed,
    #[error("malformed response head: {0}")]
    MalformedHead(httparse::Error),
    #[error("response head larger than {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("invalid response framing: {0}")]
    Framing(&'static str),
    #[error("the connection closed before the end of the response body")]
    BodyCut,
    #[error("no response head before the response timeout")]
    TimedOut,
    #[error("no more of the response body within the read timeout ({0:?})")]
    ReadTimedOut(std::time::Duration),
    #[error("no more of the client's request body within body_read_timeout ({0:?})")]
    ClientBodyTimedOut(std::time::Duration),
    #[error("more than {MAX_INTERIM} interim (1xx) responses to one request")]
    TooManyInterim,
    #[error("101 Switching Protocols to a protocol the request did not offer")]
    UnexpectedUpgrade,
    #[error("reading the client's request body failed: {0}")]
    ClientBody(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<FramingError> for ExchangeError {
    fn from(error: FramingError) -> ExchangeError {
        match error {
            FramingError::Framing(reason) => ExchangeError::Framing(reason),
            FramingError::TrailersTooLarge => ExchangeError::HeadTooLarge,
            FramingError::MalformedTrailers(error) => ExchangeError::MalformedHead(error),
        }
    }
}

impl ExchangeError {
    /// True when the upstream closed or reset the connection before answering anything: on a
    /// reused connection, most likely it closed it while idle and never saw the request.
    pub(crate) fn is_close_before_answer(&self) -> bool {
        match self {
            ExchangeError::Closed => true,
            ExchangeError::Io(error) => matches!(
                error.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionAborted
            ),
            _ => false,
        }
    }
}

impl From<ResponseHeadError> for ExchangeError {
    fn from(error: ResponseHeadError) -> ExchangeError {
        match error {
            ResponseHeadError::Malformed(error) => ExchangeError::MalformedHead(error),
            ResponseHeadError::TooLarge(_) => ExchangeError::HeadTooLarge,
            ResponseHeadError::Framing(reason) => ExchangeError::Framing(reason),
        }
    }
}
