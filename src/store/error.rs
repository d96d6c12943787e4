//! How a call to the shared store fails, as metrics count it and clients are told to wait.
//!
//! A leaf: it names nothing else of the crate, so every part of the store (and the limiter
//! above it) can use it. What Redis sent is kept as it came (`ErrorReply`); everything else
//! is a typed cause, its io or TLS error kept as the `source`.
//!
//! Each error's text includes its source's: logs (`%error`) and problem bodies print the
//! text alone, and operators read the cause there ("cannot connect to 127.0.0.1:6379:
//! Connection refused"). A printer that walks `source()` as well repeats it.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a node's breaker stays open before it lets one call probe; a client refused for
/// any other store error is told to wait as long.
pub(crate) const BREAKER_OPEN_FOR: Duration = Duration::from_secs(1);

/// `Clone`: one failure is handed to every call merged into the failed one. `PartialEq` for
/// tests (see `ConnectionError`'s).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("circuit breaker open")]
    BreakerOpen { retry_in: Duration },
    #[error("connection: {0}")]
    Connection(#[source] ConnectionError),
    #[error("redis answered with an error: {0}")]
    Server(#[source] ErrorReply),
    #[error("unexpected reply: {0}")]
    Protocol(#[source] ProtocolError),
}

impl StoreError {
    /// Every `kind`, so that a Redis store's error series start at 0: a series that appears at
    /// its first error shows no `rate` or `increase` for it.
    pub const KINDS: [&'static str; 5] = [
        "timeout",
        "breaker_open",
        "connection",
        "server",
        "protocol",
    ];

    /// The `kind` label of `rlp_store_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::BreakerOpen { .. } => "breaker_open",
            StoreError::Connection(_) => "connection",
            StoreError::Server(_) => "server",
            StoreError::Protocol(_) => "protocol",
        }
    }

    /// When a client refused for this error may try again.
    pub fn retry_in(&self) -> Duration {
        match self {
            StoreError::BreakerOpen { retry_in } => *retry_in,
            _ => BREAKER_OPEN_FOR,
        }
    }

    /// The error line Redis answered, if it answered one.
    pub fn reply(&self) -> Option<&ErrorReply> {
        match self {
            StoreError::Server(reply) => Some(reply),
            _ => None,
        }
    }

    /// Redis answered `NOSCRIPT`: it does not have the script (restarted, flushed).
    pub fn is_noscript(&self) -> bool {
        self.reply().is_some_and(ErrorReply::is_noscript)
    }
}

impl From<ConnectionError> for StoreError {
    fn from(error: ConnectionError) -> StoreError {
        StoreError::Connection(error)
    }
}

impl From<ErrorReply> for StoreError {
    fn from(reply: ErrorReply) -> StoreError {
        StoreError::Server(reply)
    }
}

impl From<ProtocolError> for StoreError {
    fn from(error: ProtocolError) -> StoreError {
        StoreError::Protocol(error)
    }
}

/// An error reply, the line after `-` as Redis sent it (`NOSCRIPT No matching script...`,
/// `MOVED 3999 127.0.0.1:6381`). Wire data: kept as text, read through its methods.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ErrorReply(Arc<str>);

impl ErrorReply {
    pub fn new(text: impl Into<Arc<str>>) -> ErrorReply {
        ErrorReply(text.into())
    }

    /// The line as Redis sent it.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// Its first word, the error's code by Redis' convention: `ERR`, `NOSCRIPT`, `MOVED`...
    pub fn code(&self) -> &str {
        self.0.split_ascii_whitespace().next().unwrap_or("")
    }

    /// The script called by its SHA1 is not loaded on this node.
    pub fn is_noscript(&self) -> bool {
        self.code() == "NOSCRIPT"
    }

    /// The node is a replica (demoted in a failover) and refuses writes.
    pub fn is_readonly(&self) -> bool {
        self.code() == "READONLY"
    }

    /// The slot is being migrated, keys of one call split across nodes: try again shortly.
    pub fn is_tryagain(&self) -> bool {
        self.code() == "TRYAGAIN"
    }

    /// A cluster redirection: `MOVED` or `ASK`, whether or not the rest can be followed.
    pub fn is_redirection(&self) -> bool {
        matches!(self.code(), "MOVED" | "ASK")
    }

    /// Where a `MOVED <slot> <host>:<port>` or `ASK <slot> <host>:<port>` sends the call
    /// (`[v6]:port` too; an empty host is the node that answered). None for other replies
    /// and for a redirection that does not read so.
    pub fn redirection(&self) -> Option<Redirection<'_>> {
        let mut words = self.0.split_ascii_whitespace();
        let kind = match words.next()? {
            "MOVED" => RedirectionKind::Moved,
            "ASK" => RedirectionKind::Ask,
            _ => return None,
        };
        let slot = words.next()?.parse().ok()?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Some(Redirection {
            kind,
            slot,
            host,
            port: port.parse().ok()?,
        })
    }
}

impl fmt::Debug for ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ErrorReply").field(&self.text()).finish()
    }
}

/// A redirection read from an `ErrorReply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirection<'a> {
    pub kind: RedirectionKind,
    pub slot: u16,
    /// Empty: the node that answered.
    pub host: &'a str,
    pub port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectionKind {
    /// The slot has moved for good: the view of the cluster is out of date.
    Moved,
    /// The slot is being migrated: this call alone goes there, after `ASKING`.
    Ask,
}

/// Why there is no usable connection (or no store to connect to).
///
/// `PartialEq` by variant and text: io errors cannot be compared, and tests compare errors
/// the way operators do, by what they say.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnectionError {
    /// The URL does not parse. Not given as the `source`: the redis crate's text may quote
    /// the URL, password and all; this text leaves such a detail out.
    #[error("{}", describe_url_error(.0))]
    BadUrl(Arc<redis::RedisError>),
    #[error("only TCP addresses are supported")]
    NotTcp,
    #[error("a cluster needs at least one seed URL")]
    NoSeed,
    #[error("not a cluster")]
    NotACluster,
    #[error("{host} cannot be a TLS server name")]
    TlsName { host: Arc<str> },
    /// `ca_file` cannot be read as PEM.
    #[error("{}: {source}", .path.display())]
    CaFile {
        path: Arc<Path>,
        #[source]
        source: Arc<rustls::pki_types::pem::Error>,
    },
    /// `ca_file` holds no certificate (empty roots would mean the system's).
    #[error("{}: no PEM certificate in the file", .path.display())]
    NoCaCertificate { path: Arc<Path> },
    #[error("TLS settings: {0}")]
    TlsSettings(#[source] rustls::Error),
    #[error("cannot connect to {address}: {source}")]
    Connect {
        address: Arc<str>,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("TLS with {address} failed: {source}")]
    Tls {
        address: Arc<str>,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("cannot connect to {address} within {within:?}")]
    ConnectTimeout { address: Arc<str>, within: Duration },
    /// `AUTH` or `SELECT` answered with an error.
    #[error("{command} refused: {reply}")]
    Refused {
        command: &'static str,
        #[source]
        reply: ErrorReply,
    },
    /// Reading or writing the socket failed.
    #[error("{0}")]
    Io(#[source] Arc<io::Error>),
    #[error("redis closed the connection")]
    Closed,
    #[error("redis closed the connection at {command}")]
    ClosedAt { command: &'static str },
    #[error("redis stopped taking commands")]
    WriteZero,
    #[error("redis answered READONLY: a replica now; connecting again")]
    Replica,
    #[error("no reply from redis for {stalled_for:?} past a call's time; connecting again")]
    Stalled { stalled_for: Duration },
    #[error("{waiting} calls already waiting for redis")]
    TooManyWaiting { waiting: usize },
    #[error("called outside a tokio event loop")]
    NoEventLoop,
    #[error("the connection's event loop stopped")]
    EventLoopStopped,
    #[error("the store was replaced")]
    Replaced,
    #[error("no node to ask for the slots")]
    NoNodeToAsk,
    /// The last read of a cluster's slots failed, and none runs.
    #[error("the cluster's slots are unknown: {0}")]
    SlotsUnknown(#[source] Box<StoreError>),
    #[error("the cluster's slots are still unknown after {0:?}")]
    SlotsStillUnknown(Duration),
}

impl ConnectionError {
    pub fn io(error: io::Error) -> ConnectionError {
        ConnectionError::Io(Arc::new(error))
    }
}

impl PartialEq for ConnectionError {
    fn eq(&self, other: &ConnectionError) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

/// The parse error of a store URL without the URL itself, which may hold a password.
pub(crate) fn describe_url_error(error: &redis::RedisError) -> String {
    let detail = error.detail().unwrap_or_default();
    let detail = if detail.contains('@') { "" } else { detail };
    format!(
        "expected redis://[user:password@]host[:port][/db] or rediss://… ({}{}{})",
        error.category(),
        if detail.is_empty() { "" } else { ": " },
        detail
    )
}

/// What kind of reply came, for an error that says it was not the one expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyKind {
    Nil,
    Status,
    Integer,
    Bulk,
    Array,
}

impl fmt::Display for ReplyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplyKind::Nil => "nil",
            ReplyKind::Status => "a status",
            ReplyKind::Integer => "an integer",
            ReplyKind::Bulk => "a bulk string",
            ReplyKind::Array => "an array",
        })
    }
}

/// Redis (or whatever answers on its port) said something the gateway cannot read, or the
/// replies and the calls waiting for them no longer line up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    // RESP itself.
    #[error("a reply line without CRLF")]
    NoCrlf,
    /// A length or an integer reply that is not a number; the text as it came.
    #[error("{0:?} is not an integer")]
    NotAnInteger(Box<str>),
    #[error("a reply of unknown type {0:?}")]
    UnknownType(char),
    /// Negative (other than nil's -1) or longer than the gateway takes.
    #[error("a bulk string of {0} bytes")]
    BulkLength(i64),
    #[error("a bulk string longer than it said")]
    BulkTooLong,
    #[error("an array of {0} items")]
    ArrayLength(i64),
    #[error("arrays nested too deep")]
    TooDeep,
    #[error("bytes after the reply")]
    BytesAfter,
    #[error("a reply cut short")]
    CutShort,

    // Replies and calls.
    #[error("a reply to no command")]
    ReplyToNoCommand,
    #[error("call lost")]
    CallLost,
    /// A merged call's reply is not as long as its calls' pieces together.
    #[error("a reply of {got} bytes to calls of {expected}")]
    MergedLength { got: usize, expected: usize },

    // What a reply holds.
    #[error("{got} where {expected} was expected")]
    Unexpected {
        expected: &'static str,
        got: ReplyKind,
    },
    /// A bulk reply whose length does not fit what was asked: `bytes` for `items` `of`.
    #[error("{bytes} bytes for {items} {of}")]
    Length {
        bytes: usize,
        items: usize,
        of: &'static str,
    },
    #[error("{0} is not a count")]
    NotACount(f64),
    /// `what`: "a tier".
    #[error("{what} that is not UTF-8")]
    NotUtf8 { what: &'static str },

    // A cluster.
    #[error("more than {most} redirections for slot {slot}")]
    TooManyRedirections { most: usize, slot: u16 },
    #[error("cannot follow {:?}", .0.text())]
    BadRedirection(ErrorReply),
    /// `CLUSTER SLOTS` answered something else than ranges of slots: `what` says where.
    #[error("CLUSTER SLOTS: {what}")]
    BadSlots { what: &'static str },
    #[error("CLUSTER SLOTS: slots {start}..{end}")]
    BadSlotRange { start: i64, end: i64 },
    #[error("{address} serves no slots")]
    ServesNoSlots { address: Arc<str> },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed() {
        let errors = [
            StoreError::Timeout(Duration::ZERO),
            StoreError::BreakerOpen {
                retry_in: Duration::ZERO,
            },
            StoreError::Connection(ConnectionError::Closed),
            StoreError::Server(ErrorReply::new("ERR")),
            StoreError::Protocol(ProtocolError::CallLost),
        ];
        let kinds: Vec<&str> = errors.iter().map(StoreError::kind).collect();
        assert_eq!(kinds, StoreError::KINDS);
    }

    #[test]
    fn an_error_reply_is_read_by_its_code() {
        let reply = ErrorReply::new("NOSCRIPT No matching script. Please use EVAL.");
        assert_eq!(reply.code(), "NOSCRIPT");
        assert!(reply.is_noscript() && !reply.is_readonly() && !reply.is_redirection());
        let reply = ErrorReply::new("READONLY You can't write against a read only replica.");
        assert!(reply.is_readonly() && !reply.is_noscript());
        // A code is a whole word: "NOSCRIPTS" is not NOSCRIPT.
        assert!(!ErrorReply::new("NOSCRIPTS x").is_noscript());
        assert_eq!(ErrorReply::new("").code(), "");
        assert_eq!(
            StoreError::Server(ErrorReply::new("ERR script failed")).to_string(),
            "redis answered with an error: ERR script failed"
        );
    }

    #[test]
    fn redirections_are_read_into_where_to_go() {
        let moved = ErrorReply::new("MOVED 3999 127.0.0.1:6381");
        assert_eq!(
            moved.redirection(),
            Some(Redirection {
                kind: RedirectionKind::Moved,
                slot: 3999,
                host: "127.0.0.1",
                port: 6381
            })
        );
        let ask = ErrorReply::new("ASK 12 [::1]:7000");
        assert_eq!(
            ask.redirection().map(|r| (r.kind, r.host, r.port)),
            Some((RedirectionKind::Ask, "::1", 7000))
        );
        assert_eq!(
            ErrorReply::new("ASK 12 :7000")
                .redirection()
                .map(|r| r.host),
            Some("")
        );
        for unreadable in ["MOVED 3999 nowhere", "MOVED x 1.2.3.4:5", "MOVED 1"] {
            let reply = ErrorReply::new(unreadable);
            assert!(reply.is_redirection() && reply.redirection().is_none());
        }
        assert_eq!(ErrorReply::new("ERR MOVED 1 a:1").redirection(), None);
    }

    #[test]
    fn texts_say_what_operators_read() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let connect = StoreError::Connection(ConnectionError::Connect {
            address: "127.0.0.1:1".into(),
            source: Arc::new(refused),
        });
        assert!(
            connect
                .to_string()
                .starts_with("connection: cannot connect to 127.0.0.1:1: "),
            "{connect}"
        );
        assert!(std::error::Error::source(&connect).is_some());
        let timeout = StoreError::Timeout(Duration::from_millis(100));
        assert_eq!(timeout.to_string(), "no answer within 100ms");
        let unexpected = StoreError::Protocol(ProtocolError::Unexpected {
            expected: "a bulk string",
            got: ReplyKind::Integer,
        });
        assert_eq!(
            unexpected.to_string(),
            "unexpected reply: an integer where a bulk string was expected"
        );
        assert_eq!(
            ConnectionError::Closed,
            ConnectionError::Closed,
            "compared by variant and text"
        );
        assert_ne!(
            ConnectionError::Closed,
            ConnectionError::ClosedAt { command: "AUTH" }
        );
    }
}
