//! What serving says once it accepts: a line per listener (`listening`, `admin listening`),
//! then one `started` line with what an operator checks first after a deploy: the version and
//! commit, the config file, every listener and the admin address.

use std::net::SocketAddr;

use crate::build_info;
use crate::config::Config;

/// The addresses serving listens on, noted before the listeners are handed to the workers.
pub(super) struct Listening {
    /// Each proxy listener's address, and whether it speaks TLS.
    pub proxy: Vec<(SocketAddr, bool)>,
    pub admin: Option<SocketAddr>,
}

impl Listening {
    pub(super) fn log(&self, config: &Config) {
        if let Some(admin) = self.admin {
            tracing::info!(%admin, "admin listening");
        }
        for &(addr, tls) in &self.proxy {
            tracing::info!(%addr, tls, "listening");
        }
        let listeners: Vec<String> = (self.proxy.iter())
            .map(|(addr, tls)| format!("{}://{addr}", if *tls { "https" } else { "http" }))
            .collect();
        let admin = self
            .admin
            .map_or("none".to_string(), |addr| addr.to_string());
        tracing::info!(
            version = build_info::VERSION,
            commit = build_info::COMMIT,
            config = %config.source,
            listeners = %listeners.join(" "),
            %admin,
            workers = config.server.workers,
            "started"
        );
    }
}
