//! Where limit state lives. The memory store makes one instance exact; the Redis store makes a
//! fleet exact with the same semantics: every window of every limit of a request
//! is checked at once, and a denied request consumes nothing anywhere.

pub(crate) mod breaker;
pub(crate) mod cluster;
mod connect;
pub(crate) mod denied;
pub(crate) mod error;
pub(crate) mod memory;
pub(crate) mod node;
pub(crate) mod pipe;
pub(crate) mod redis;
pub(crate) mod redis_config;
mod resp;
#[cfg(any(test, fuzzing, feature = "testing"))]
pub(crate) use resp::{
    Frame, LONGEST_BULK, Value as ReplyValue, parse as parse_reply, tree as reply_tree,
};
pub(crate) mod lease_sync;
pub(crate) mod script;
pub(crate) mod settle;
pub(crate) mod slot;
mod tiers;
pub(crate) mod warm;
