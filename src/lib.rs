//! ratelimit-proxy: an edge reverse proxy that sheds abusive traffic before it reaches an API.
//! See docs/ARCHITECTURE.md for the pipeline and the config contract. `main` and the integration tests
//! both run the gateway through [`serve`] or [`Gateway`].

// Every byte of untrusted input is handled in safe Rust; what needs `unsafe` comes from crates.
#![forbid(unsafe_code)]

pub mod added_fields;
pub mod admin_probe;
pub mod body;
pub mod build_info;
pub mod canonical;
pub mod client_ip;
pub mod clock;
pub mod config;
pub mod echo;
pub mod edge;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
pub mod http1;
pub mod ip_set;
pub mod limit;
pub mod metrics;
pub mod proxy;
pub mod request_id;
pub mod respond;
pub mod route;
pub mod server;
pub mod spare;
pub mod store;
pub mod tls;
pub mod upstream_fields;
pub mod worker;

use std::future::Future;

pub use config::{Config, ConfigError};
pub use server::{Drain, Gateway, ServeError};

/// Binds the listeners of `config` and serves until `shutdown` completes, then drains.
pub async fn serve(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Drain, ServeError> {
    Gateway::bind(config).await?.serve(shutdown).await
}
