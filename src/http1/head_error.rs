//! Why an HTTP/1 request head cannot be served: what the server answers before the request
//! reaches the pipeline (the status is chosen in `respond`, with every other one).

/// A request head the server refuses; the connection closes after the answer, as what
/// follows the head cannot be told apart from it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    #[error("malformed request head: {0}")]
    Malformed(httparse::Error),
    #[error("the request head is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the request head has more than {0} fields")]
    TooManyFields(usize),
    /// A well-formed version whose major version is not 1 (RFC 9110 §15.6.6).
    #[error("only HTTP/1.x is served over this connection")]
    Version,
    #[error("the HTTP/2 preface is only read at the start of a connection")]
    LatePreface,
    #[error("invalid request target")]
    Target,
    #[error("invalid request framing: {0}")]
    Framing(&'static str),
    #[error("transfer coding {0:?} is not supported; only chunked is")]
    Coding(String),
}
