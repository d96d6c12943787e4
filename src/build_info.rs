//! What this binary is: its version and the commit it was built from (`build.rs`), for
//! `rlp_build_info` and the startup log line.

/// The package version, as in `Cargo.toml`.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit (12 hex digits) the binary was built from, or "unknown" when the source had
/// no `.git` and no `RLP_GIT_COMMIT` was given.
pub const COMMIT: &str = env!("RLP_GIT_COMMIT");

/// What `--version` prints after the binary's name: `0.1.0 (3f2a9c1b7d4e)`.
pub(crate) const VERSION_AND_COMMIT: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (", env!("RLP_GIT_COMMIT"), ")");
