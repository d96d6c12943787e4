//! The integration tests: one binary, a module per area, the shared harness in `support`.
//! One binary links the crate once; 42 binaries each linked it (12 GB of `target/`).

mod admin;
mod bypass;
mod config;
mod limits;
mod server;
mod store;
mod support;
mod upstream;
