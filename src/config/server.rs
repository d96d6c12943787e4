//! Validation of `[server]` and `[log]`: listeners, connection limits and the deadlines of the
//! client's side of every exchange.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use super::problems::{Problems, echo};
use super::raw::{RawLog, RawServer};
use super::requests;
use super::{DeniedLines, LogConfig, ServerConfig};

pub(super) fn log_config(raw: Option<&RawLog>, problems: &mut Problems) -> LogConfig {
    let Some(raw) = raw else {
        return LogConfig::default();
    };
    let json = match raw.format.as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(other) => {
            problems.push(
                "log.format",
                format!("expected \"text\" or \"json\", got {}", echo(other)),
            );
            false
        }
    };
    LogConfig {
        json,
        access: raw.access.unwrap_or(false),
        denied: raw.denied.as_deref().map_or(DeniedLines::All, |text| {
            denied_lines(text).unwrap_or_else(|| {
                let expected = format!("expected \"all\", \"none\" or \"1/N\" (one line in N, N from 1 to {MAX_DENIED_SAMPLE})");
                problems.push("log.denied", format!("{expected}, got {}", echo(text)));
                DeniedLines::All
            })
        }),
    }
}

/// The largest N of `denied = "1/N"`.
const MAX_DENIED_SAMPLE: u32 = 1_000_000;

/// `"all"`, `"none"` or `"1/N"` (`"1/1"` is all).
fn denied_lines(text: &str) -> Option<DeniedLines> {
    match text {
        "all" => Some(DeniedLines::All),
        "none" => Some(DeniedLines::Skip),
        _ => {
            let one_in: u32 = text.strip_prefix("1/")?.parse().ok()?;
            match NonZeroU32::new(one_in)? {
                n if n.get() > MAX_DENIED_SAMPLE => None,
                n if n.get() == 1 => Some(DeniedLines::All),
                n => Some(DeniedLines::OneIn(n)),
            }
        }
    }
}

pub(super) fn server(raw: &RawServer, problems: &mut Problems) -> ServerConfig {
    let listen = listen(raw, problems);
    ServerConfig {
        listen,
        header_read_timeout: problems.duration(
            "server.header_read_timeout".into(),
            raw.header_read_timeout.as_deref(),
            Duration::from_secs(10),
        ),
        idle_timeout: problems.duration(
            "server.idle_timeout".into(),
            raw.idle_timeout.as_deref(),
            Duration::from_secs(60),
        ),
        body_read_timeout: problems.duration(
            "server.body_read_timeout".into(),
            raw.body_read_timeout.as_deref(),
            Duration::from_secs(60),
        ),
        send_timeout: problems.duration(
            "server.send_timeout".into(),
            raw.send_timeout.as_deref(),
            Duration::from_secs(60),
        ),
        tunnel_idle_timeout: problems.duration(
            "server.tunnel_idle_timeout".into(),
            raw.tunnel_idle_timeout.as_deref(),
            Duration::from_secs(3600),
        ),
        tunnel_send_timeout: problems.duration(
            "server.tunnel_send_timeout".into(),
            raw.tunnel_send_timeout.as_deref(),
            Duration::from_secs(300),
        ),
        max_connections: problems.number(
            "server.max_connections".into(),
            raw.max_connections,
            (1, 10_000_000),
            20_000,
        ) as usize,
        // hyper's HTTP/1 read buffer cannot be smaller than 8 KiB.
        max_header_bytes: problems.number(
            "server.max_header_bytes".into(),
            raw.max_header_bytes,
            (8192, 1 << 24),
            32768,
        ) as usize,
        shutdown_grace: problems.duration(
            "server.shutdown_grace".into(),
            raw.shutdown_grace.as_deref(),
            Duration::from_secs(30),
        ),
        workers: problems.number(
            "server.workers".into(),
            raw.workers,
            (1, MAX_WORKERS),
            default_workers(),
        ) as usize,
        tls: Vec::new(),
        underscores: requests::underscores(raw, problems),
        escaped_slashes: requests::escaped_slashes(raw, problems),
        allow_trace: raw.allow_trace.unwrap_or(false),
    }
}

/// `listen`: at least one `IP:port`.
fn listen(raw: &RawServer, problems: &mut Problems) -> Vec<SocketAddr> {
    let default_listen = vec!["0.0.0.0:8080".to_string()];
    let listen_text = raw.listen.as_ref().unwrap_or(&default_listen);
    if listen_text.is_empty() {
        problems.push(
            "server.listen",
            "expected at least one address such as \"0.0.0.0:8080\"",
        );
    }
    listen_text
        .iter()
        .enumerate()
        .filter_map(|(i, text)| match text.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                problems.push(
                    format!("server.listen[{i}]"),
                    format!(
                        "expected IP:port such as \"0.0.0.0:8080\", got {}",
                        echo(text)
                    ),
                );
                None
            }
        })
        .collect()
}

const MAX_WORKERS: i64 = 1024;

/// One worker per CPU the process may use, as nginx's `worker_processes auto`.
fn default_workers() -> i64 {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS as usize) as i64)
}
