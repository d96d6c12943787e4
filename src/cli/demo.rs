//! `demo`: a built-in config in front of a built-in echo upstream on loopback; and the echo
//! upstream alone, for the load scripts under `benches/`.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;

use super::logging::init_logging;
use super::serve::{log_exit, shutdown_signal};

pub(super) async fn demo(
    listen: SocketAddr,
    admin: Option<SocketAddr>,
) -> anyhow::Result<ExitCode> {
    init_logging(false);
    let upstream = crate::cli::echo::spawn("127.0.0.1:0".parse()?)
        .await
        .context("cannot start the echo upstream")?;
    let mut text = DEMO_CONFIG
        .replace("{LISTEN}", &listen.to_string())
        .replace("{UPSTREAM}", &upstream.to_string());
    if let Some(admin) = admin {
        text.push_str(&format!("\n[admin]\nlisten = \"{admin}\"\n"));
    }
    let config = crate::config::parse_str(&text, "built-in demo config")?;
    let gateway = crate::Gateway::bind(config).await?;
    let url = format!("http://{}", gateway.local_addrs()[0]);
    say!("ratelimit-proxy demo: {url} -> echo upstream at http://{upstream}");
    say!("  limits: 10 per 10 s per x-api-key (or per IP without one), 3 per minute on /login");
    say!(
        "  try: curl -i {url}/hello                      # see X-RateLimit-* and RateLimit headers"
    );
    say!(
        "       for i in $(seq 12); do curl -s -o /dev/null -w '%{{http_code}} ' {url}/hello; done"
    );
    say!(
        "       oha -z 10s -c 50 -H 'x-api-key: load' {url}/hello   # mostly 429: one key, 10 per 10 s"
    );
    if let Some(admin) = admin {
        say!(
            "  admin: curl http://{admin}/metrics   (also /healthz /readyz /config /debug/limited)"
        );
    }
    say!("  stop with Ctrl-C");
    log_exit(gateway.serve(shutdown_signal()).await?);
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn echo(listen: SocketAddr) -> anyhow::Result<ExitCode> {
    init_logging(false);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    say!("echo upstream on http://{}", listener.local_addr()?);
    crate::cli::echo::serve(listener, shutdown_signal()).await;
    Ok(ExitCode::SUCCESS)
}

const DEMO_CONFIG: &str = r#"
[server]
listen = ["{LISTEN}"]
shutdown_grace = "5s"

[edge]
rate = "500/s"
burst = 1000

[store]
backend = "memory"
# Only for this demo on loopback: a real config sets a long random value of its own.
hash_secret = "demo-only-not-a-secret"

[[upstreams]]
name = "echo"
servers = ["http://{UPSTREAM}"]

[[routes]]
name = "login"
path_prefix = "/login"
upstream = "echo"
limits = ["login-per-ip"]

[[routes]]
name = "default"
path_prefix = "/"
upstream = "echo"
limits = ["per-key"]

[[limits]]
name = "per-key"
key = ["header:x-api-key"]
missing = "ip"
rates = [{ limit = 10, per = "10s" }, { limit = 1000, per = "1d" }]

[[limits]]
name = "login-per-ip"
key = ["ip"]
algorithm = "sliding_window"
rates = [{ limit = 3, per = "1m" }]
"#;
