//! Validation of `[[upstreams]]`: servers, balancing, the deadlines of the upstream's side of
//! an exchange, ejection and health checks.

use std::path::Path;
use std::time::Duration;

use http::uri::{Scheme, Uri};

use super::problems::{Problems, echo};
use super::raw::{RawHealthCheck, RawUpstream};
use super::tls;
use super::{Balance, HealthCheck, UpstreamConfig, UpstreamServer};

pub(super) fn upstream(
    raw: &RawUpstream,
    path: &str,
    base_dir: &Path,
    problems: &mut Problems,
) -> UpstreamConfig {
    if raw.servers.is_empty() {
        problems.push(
            format!("{path}.servers"),
            "expected at least one server such as \"http://127.0.0.1:9001\"",
        );
    }
    let servers = raw
        .servers
        .iter()
        .enumerate()
        .filter_map(|(i, text)| match upstream_server(text) {
            Ok(server) => Some(server),
            Err(message) => {
                problems.push(format!("{path}.servers[{i}]"), message);
                None
            }
        })
        .collect();
    let balance = match raw.balance.as_deref() {
        None | Some("round_robin") => Balance::RoundRobin,
        Some("least_requests") => Balance::LeastRequests,
        Some(other) => {
            problems.push(
                format!("{path}.balance"),
                format!(
                    "expected \"round_robin\" or \"least_requests\", got {}",
                    echo(other)
                ),
            );
            Balance::RoundRobin
        }
    };
    UpstreamConfig {
        name: raw.name.clone(),
        servers,
        balance,
        connect_timeout: problems.duration(
            format!("{path}.connect_timeout"),
            raw.connect_timeout.as_deref(),
            Duration::from_secs(2),
        ),
        response_timeout: problems.duration(
            format!("{path}.response_timeout"),
            raw.response_timeout.as_deref(),
            Duration::from_secs(30),
        ),
        read_timeout: problems.duration(
            format!("{path}.read_timeout"),
            raw.read_timeout.as_deref(),
            Duration::from_secs(60),
        ),
        reuse_after_body: raw.reuse_after_body.unwrap_or(true),
        ejection_time: problems.duration(
            format!("{path}.ejection_time"),
            raw.ejection_time.as_deref(),
            Duration::from_secs(10),
        ),
        health_check: raw
            .health_check
            .as_ref()
            .map(|h| health_check(h, &format!("{path}.health_check"), problems)),
        tls: tls::upstream_tls(raw, path, base_dir, problems),
    }
}

fn upstream_server(text: &str) -> Result<UpstreamServer, String> {
    let expected = || {
        format!(
            "expected a URL such as \"http://127.0.0.1:9001\", got {}",
            echo(text)
        )
    };
    let uri: Uri = text.parse().map_err(|_| expected())?;
    let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
        return Err(expected());
    };
    if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
        return Err(format!(
            "expected an http:// or https:// URL, got {}",
            echo(text)
        ));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() || authority.as_str().contains('@')
    {
        return Err(format!(
            "expected scheme://host:port with no path, query or user, got {}",
            echo(text)
        ));
    }
    Ok(UpstreamServer {
        scheme: scheme.clone(),
        authority: authority.clone(),
    })
}

fn health_check(raw: &RawHealthCheck, path: &str, problems: &mut Problems) -> HealthCheck {
    if !raw.path.starts_with('/') || raw.path.parse::<http::uri::PathAndQuery>().is_err() {
        problems.push(
            format!("{path}.path"),
            format!(
                "expected a path starting with \"/\", got {}",
                echo(&raw.path)
            ),
        );
    }
    HealthCheck {
        path: raw.path.clone(),
        interval: problems.duration(
            format!("{path}.interval"),
            raw.interval.as_deref(),
            Duration::from_secs(5),
        ),
        timeout: problems.duration(
            format!("{path}.timeout"),
            raw.timeout.as_deref(),
            Duration::from_secs(2),
        ),
        healthy_threshold: problems.number(
            format!("{path}.healthy_threshold"),
            raw.healthy_threshold,
            (1, 100),
            2,
        ) as u32,
        unhealthy_threshold: problems.number(
            format!("{path}.unhealthy_threshold"),
            raw.unhealthy_threshold,
            (1, 100),
            2,
        ) as u32,
    }
}
