//! What the integration tests, benches and fuzz targets reach inside the crate. Not an API:
//! hidden from the docs and compiled only for them (the `testing` feature, which the crate's
//! own dev-dependency turns on, `cfg(test)` and `cfg(fuzzing)`).

// The fuzz entry points are oracles: a panic is what they find.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod fuzz;

/// The echo upstream of `demo`, which tests and benches put behind a gateway.
pub mod echo {
    pub use crate::cli::echo::{serve, spawn};
}

pub use crate::admission::edge::{EdgeLayer, EdgePolicy};
pub use crate::admission::limiter::{Limiter, Stores};
pub use crate::build_info::COMMIT;
pub use crate::config::{MAX_PROBLEMS, load, parse_duration, parse_str};
pub use crate::http1::request_fields::RequestFields;
pub use crate::limit::key::{KeyPart, Missing, RequestFacts};
pub use crate::limit::lease::{Grant, SyncAsk};
pub use crate::limit::rules::{Consistency, LimitRule, OnError, Window};
pub use crate::limit::settle::{Adjustment, Reserved};
pub use crate::limit::window::{Small, WindowRequest};
pub use crate::limit::{Algorithm, Rate, WindowCheck};
pub use crate::request::canonical::{host, path};
pub use crate::request::client_ip::{ClientIpPolicy, ForwardHeader};
pub use crate::request::ip_set::IpSet;
pub use crate::request::route::RouteLimits;
pub use crate::rt::clock::{Clock, ManualClock, SystemClock};
pub use crate::rt::worker;
pub use crate::server::watch_files;
pub use crate::store::error::{ConnectionError, ErrorReply, ProtocolError, StoreError};
pub use crate::store::lease_sync::{SyncEntry, SyncReply};
pub use crate::store::memory::MemoryStore;
pub use crate::store::node::NodePipe;
pub use crate::store::pipe::{Command, Reply, Settings, Tls};
pub use crate::store::redis::{Outcome, RedisStore};
pub use crate::store::redis_config::RedisConfig;
pub use crate::store::script::{SCRIPT, ScriptCall};
pub use crate::store::settle::{ElapsedReservation, SETTLE_SCRIPT};
pub use crate::tls::upstream::{UpstreamTls, client_config};
pub use crate::usage::{BodyFormat, UsageError, UsageFields, UsageScanner};
