//! `[store]` as the Redis backends use it.

use std::time::Duration;

/// However Redis answers the calls before it, a call gives up after this many times the
/// store's timeout (and not before a second): the gateway has fallen this far behind.
const LONGEST_WAIT_TIMEOUTS: u32 = 20;
const LONGEST_WAIT_AT_LEAST: Duration = Duration::from_secs(1);

/// `[store]` for the Redis backends.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    pub cluster: bool,
    /// One URL, or the seed nodes of a cluster. May carry a password: never log them.
    pub urls: Vec<String>,
    /// How long Redis may keep a call waiting once it could have started on it (see
    /// `pipe::Settings::timeout`).
    pub timeout: Duration,
    /// Opening a connection (TCP, TLS, AUTH) and, on a cluster, reading its slots.
    pub connect_timeout: Duration,
    pub key_prefix: String,
    /// PEM roots to verify `rediss://` servers with, instead of the system's.
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("cluster", &self.cluster)
            .field("nodes", &self.urls.len())
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

impl RedisConfig {
    /// The longest a call may wait in all (see `LONGEST_WAIT_TIMEOUTS`).
    pub fn longest_wait(&self) -> Duration {
        (self.timeout.saturating_mul(LONGEST_WAIT_TIMEOUTS)).max(LONGEST_WAIT_AT_LEAST)
    }
}
