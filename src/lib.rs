//! ratelimit-proxy: an edge reverse proxy that sheds abusive traffic before it reaches an API.
//! See docs/ARCHITECTURE.md for the pipeline and the config contract. `main` and the integration tests
//! both run the gateway through [`serve`] or [`Gateway`].

// Every byte of untrusted input is handled in safe Rust; what needs `unsafe` comes from crates.
#![forbid(unsafe_code)]
// `pub(crate)` unless the API (below) or `testing` exports it, so the compiler reports dead
// code. Checked where `testing` exists (tests, benches, clippy --all-targets): without it the
// items only the tests reach would be reported too.
#![cfg_attr(any(test, fuzzing, feature = "testing"), warn(unreachable_pub))]
// Nothing a peer, a file or a config can influence may panic; tests may (clippy.toml).
#![warn(clippy::unwrap_used, clippy::expect_used)]

// The layers, lowest first: each imports only layers before it (`tools/module_cycles.py`
// fails on a cycle; docs/ARCHITECTURE.md has the map).
//   rt, build_info, http1, usage,   what everything runs on; the HTTP/1 codec; the usage an
//   tls                             answer's body reports; rustls
//   request, fields                 the canonical request, client IP, routes; an answer's fields
//   limit, store                    pure limit algorithms; where limit state lives
//   admission, metrics, config      edge, limiter, leases, admit; metrics; the config contract
//   upstream, response              the upstream client; every answer the gateway makes
//   settle                          reservations settled by the answers
//   runtime, proxy, server, cli     a Runtime from a Config; the pipeline; listeners; the command
mod admission;
mod build_info;
pub mod cli;
mod config;
mod fields;
mod http1;
mod limit;
mod metrics;
mod proxy;
mod request;
mod response;
mod rt;
mod runtime;
mod server;
mod settle;
mod store;
#[cfg(any(test, fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
mod tls;
mod upstream;
mod usage;

use std::future::Future;

pub use config::{Config, ConfigError};
pub use server::{CertificateReloader, Drain, Gateway, Reloader, ServeError};

/// Binds the listeners of `config` and serves until `shutdown` completes, then drains.
pub async fn serve(
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<Drain, ServeError> {
    Gateway::bind(config).await?.serve(shutdown).await
}
