//! How a call to the shared store fails, as metrics count it and clients are told to wait.

use std::time::Duration;

/// How long a node's breaker stays open before it lets one call probe; a client refused for
/// any other store error is told to wait as long.
pub(crate) const BREAKER_OPEN_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("circuit breaker open")]
    BreakerOpen { retry_in: Duration },
    #[error("connection: {0}")]
    Connection(String),
    #[error("redis answered with an error: {0}")]
    Server(String),
    #[error("unexpected reply: {0}")]
    Protocol(String),
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
            StoreError::Connection(String::new()),
            StoreError::Server(String::new()),
            StoreError::Protocol(String::new()),
        ];
        let kinds: Vec<&str> = errors.iter().map(StoreError::kind).collect();
        assert_eq!(kinds, StoreError::KINDS);
    }
}
