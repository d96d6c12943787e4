//! Where the gateway's log lines go.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Logs go to stderr, as text or one JSON object a line (`[log] format`); RUST_LOG filters.
/// Colours only on a terminal: in a file or a log collector they are escape codes to strip.
pub(super) fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
