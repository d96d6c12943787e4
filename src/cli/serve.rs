//! Serving a config file: the gateway, reloads on SIGHUP and on file changes, and the drain
//! on SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

pub(super) async fn serve(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let path = config.context(
        "no config given: run `ratelimit-proxy --config gw.toml` (or `ratelimit-proxy demo`)",
    )?;
    let config = match crate::config::load(&path) {
        Ok(config) => config,
        Err(error) => {
            say_err!("{error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    super::logging::init_logging(config.log.json);
    let gateway = crate::Gateway::bind(config).await?;
    let reloader = gateway.reloader();
    tokio::spawn(reload_on_sighup(reloader.clone()));
    let watching = tokio_util::sync::CancellationToken::new();
    tokio::spawn(crate::server::watch_files(
        reloader,
        CONFIG_POLL,
        watching.clone(),
    ));
    let drain = gateway.serve(shutdown_signal()).await?;
    watching.cancel();
    log_exit(drain);
    Ok(ExitCode::SUCCESS)
}

/// The process's last line: how the drain ended and how long it took.
pub(super) fn log_exit(drain: crate::Drain) {
    tracing::info!(
        drain = drain.ended(),
        took_ms = drain.took.as_millis() as u64,
        cut = drain.cut,
        "exited"
    );
    super::logging::flush_at_exit();
}

/// How often the config file and the files it names are checked for changes.
const CONFIG_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Reloads the config on every SIGHUP.
async fn reload_on_sighup(reloader: crate::server::Reloader) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; reload by changing the config file");
                return;
            }
        };
        while hangups.recv().await.is_some() {
            let attempt = reloader.clone();
            // The outcome is logged by reload().
            let _ = tokio::task::spawn_blocking(move || attempt.reload()).await;
        }
    }
    #[cfg(not(unix))]
    drop(reloader);
}

/// Completes on SIGINT or SIGTERM.
pub(super) async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => return interrupt.await.unwrap_or_default(),
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    interrupt.await.unwrap_or_default();
}
