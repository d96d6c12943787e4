//! Hot reload: the config file is read and validated in full, then the runtime built from it is
//! swapped in atomically; requests already running finish on the runtime they started with. A
//! config that fails validation changes nothing. Limit and edge state carry over where their
//! rates did not change, and upstream servers' health and idle connections where their
//! definition did not (see `Runtime::succeeding`). Listen addresses need a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use super::CertificateReloader;
use crate::config::{self, Config, ConfigError};
use crate::metrics::ResultLabel;
use crate::runtime::Runtime;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot set up TLS for the new config: {0}")]
    Tls(#[from] rustls::Error),
    #[error("certificates: {0}")]
    Certificates(String),
}

/// The config in force and the token that ends its background work (health checks).
pub(super) struct Generation {
    pub config: Config,
    pub background: CancellationToken,
}

/// Reloads the gateway's config from its file; cheap to clone.
#[derive(Clone)]
pub struct Reloader {
    pub(super) path: PathBuf,
    pub(super) runtime: Arc<ArcSwap<Runtime>>,
    pub(super) generation: Arc<Mutex<Generation>>,
    pub(super) stop: CancellationToken,
    pub(super) certificates: CertificateReloader,
}

impl Reloader {
    /// Reads, validates and swaps in the config; logs the outcome. On error nothing changes.
    pub fn reload(&self) -> Result<(), ReloadError> {
        let result = self.try_reload();
        let outcome = if result.is_ok() { "success" } else { "failure" };
        let metrics = self.runtime.load().metrics.clone();
        metrics
            .config_reloads
            .get_or_create(&ResultLabel { result: outcome })
            .inc();
        match &result {
            Ok(()) => tracing::info!(file = %self.path.display(), "config reloaded"),
            Err(error) => {
                tracing::error!(file = %self.path.display(), "config reload failed, keeping the old config:\n{error}")
            }
        }
        result
    }

    fn try_reload(&self) -> Result<(), ReloadError> {
        let config = config::load(&self.path)?;
        let mut generation = self
            .generation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let runtime = Runtime::succeeding(&config, &self.runtime.load())?;
        for warning in self
            .certificates
            .reload()
            .map_err(ReloadError::Certificates)?
        {
            tracing::warn!("{warning}");
        }
        warn_about_restart_only_changes(&generation.config, &config);
        for warning in &config.warnings {
            tracing::warn!("{}: {warning}", config.source);
        }
        let background = self.stop.child_token();
        runtime.start_background(&background);
        self.runtime.store(Arc::new(runtime));
        generation.background.cancel();
        *generation = Generation { config, background };
        Ok(())
    }

    /// The config file and every file it read, for change detection.
    fn watched_files(&self) -> Vec<PathBuf> {
        let generation = self
            .generation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::iter::once(self.path.clone())
            .chain(generation.config.files.iter().cloned())
            .collect()
    }
}

fn warn_about_restart_only_changes(old: &Config, new: &Config) {
    let tls_addrs = |c: &Config| c.server.tls.iter().map(|t| t.listen).collect::<Vec<_>>();
    if old.server.listen != new.server.listen || tls_addrs(old) != tls_addrs(new) {
        tracing::warn!("listen addresses changed; they take effect only after a restart");
    }
    if old.log.json != new.log.json {
        tracing::warn!("[log] format changed; it takes effect only after a restart");
    }
    let sizes = |c: &Config| {
        (
            c.server.max_connections,
            c.server.workers,
            c.server.header_read_timeout,
            c.server.idle_timeout,
        )
    };
    if sizes(old) != sizes(new) {
        tracing::warn!("connection settings changed; they take effect only after a restart");
    }
}

/// Reloads whenever the config file or a file it read changes (by modification time or size),
/// checking every `every`, until `stop`.
pub async fn watch_files(reloader: Reloader, every: Duration, stop: CancellationToken) {
    let mut seen = fingerprint(&reloader.watched_files());
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let now = fingerprint(&reloader.watched_files());
        if now != seen {
            // A failed reload is logged; the next change to the files tries again.
            let attempt = reloader.clone();
            let _ = tokio::task::spawn_blocking(move || attempt.reload()).await;
            seen = fingerprint(&reloader.watched_files());
        }
    }
}

fn fingerprint(files: &[PathBuf]) -> Vec<Option<(SystemTime, u64)>> {
    files.iter().map(|f| file_stamp(f)).collect()
}

fn file_stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}
