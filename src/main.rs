//! The `ratelimit-proxy` command: serve, check a config, or run the demo.

#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// An edge reverse proxy that sheds abusive traffic before it reaches an API.
#[derive(Parser)]
#[command(version = ratelimit_proxy::build_info::VERSION_AND_COMMIT, about)]
struct Cli {
    /// The config file to serve (or check).
    #[arg(long, short, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the config and exit 0 (valid) or 1 (invalid), binding nothing; print its
    /// safety warnings.
    Check {
        /// Exit 1 when there are warnings too.
        #[arg(long)]
        strict: bool,
    },
    /// Serve a built-in config in front of a built-in echo upstream on loopback.
    Demo {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Also serve the admin endpoints (/healthz, /metrics, /config ...) here.
        #[arg(long, value_name = "IP:PORT")]
        admin: Option<SocketAddr>,
    },
    /// Exit 0 when a running gateway's admin listener answers GET /healthz with 200 within
    /// the timeout, else 1: the admin address is --admin, else `[admin] listen` of --config,
    /// else 127.0.0.1:9090.
    Health {
        #[arg(long, value_name = "IP:PORT")]
        admin: Option<SocketAddr>,
        #[arg(long, default_value = "2s", value_parser = ratelimit_proxy::config::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Run only the echo upstream (used by the load scripts under benches/).
    #[command(hide = true)]
    Echo {
        #[arg(long)]
        listen: SocketAddr,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Check { strict }) => check(cli.config, strict),
        Some(Command::Health { admin, timeout }) => health(admin, cli.config, timeout),
        Some(Command::Demo { .. }) if cli.config.is_some() => Err(anyhow::anyhow!(
            "demo serves its own built-in config and takes no --config: serve yours with `ratelimit-proxy --config FILE`"
        )),
        command => run_async(command, cli.config),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, as text or one JSON object a line (`[log] format`); RUST_LOG filters.
/// Colours only on a terminal: in a file or a log collector they are escape codes to strip.
fn init_logging(json: bool) {
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

fn check(config: Option<PathBuf>, strict: bool) -> anyhow::Result<ExitCode> {
    let path = config.context("check needs --config FILE")?;
    match ratelimit_proxy::config::load(&path) {
        Ok(config) => {
            for warning in &config.warnings {
                eprintln!("warning: {}: {warning}", config.source);
            }
            if strict && !config.warnings.is_empty() {
                let count = config.warnings.len();
                let noun = if count == 1 { "warning" } else { "warnings" };
                eprintln!(
                    "error: {}: {count} {noun}, and --strict makes them errors",
                    config.source
                );
                return Ok(ExitCode::FAILURE);
            }
            println!(
                "{}: OK ({} routes, {} upstreams)",
                config.source,
                config.routes.len(),
                config.upstreams.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("{error}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `health`: the admin listener to ask, then its answer.
fn health(
    admin: Option<SocketAddr>,
    config: Option<PathBuf>,
    timeout: std::time::Duration,
) -> anyhow::Result<ExitCode> {
    use ratelimit_proxy::admin_probe::{DEFAULT_ADMIN, probe, probe_address};
    let listen = match (admin, config) {
        (Some(admin), _) => admin,
        (None, Some(path)) => {
            let config = match ratelimit_proxy::config::load(&path) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("{error}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            config.admin.with_context(|| {
                format!("{}: no [admin] listen to ask for /healthz", config.source)
            })?
        }
        (None, None) => DEFAULT_ADMIN,
    };
    let addr = probe_address(listen);
    // The error names its cause itself: printed whole, not as anyhow's chain.
    match probe(addr, timeout) {
        Ok(()) => {
            println!("ok: GET /healthz at {addr} answered 200");
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("error: {error}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The gateway runs on this thread's single-threaded runtime as its worker 0 and starts the
/// other workers itself (see `server`); the echo upstream uses a work-stealing runtime.
fn run_async(command: Option<Command>, config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let runtime = match command {
        Some(Command::Echo { .. }) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build()
    .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        match command {
            Some(Command::Demo { listen, admin }) => demo(listen, admin).await,
            Some(Command::Echo { listen }) => echo(listen).await,
            _ => serve(config).await,
        }
    })
}

async fn serve(config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let path = config.context(
        "no config given: run `ratelimit-proxy --config gw.toml` (or `ratelimit-proxy demo`)",
    )?;
    let config = match ratelimit_proxy::config::load(&path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    init_logging(config.log.json);
    let gateway = ratelimit_proxy::Gateway::bind(config).await?;
    let reloader = gateway.reloader();
    tokio::spawn(reload_on_sighup(reloader.clone()));
    let watching = tokio_util::sync::CancellationToken::new();
    tokio::spawn(ratelimit_proxy::server::watch_files(
        reloader,
        CONFIG_POLL,
        watching.clone(),
    ));
    let drain = gateway.serve(shutdown_signal()).await?;
    watching.cancel();
    log_exit(drain);
    Ok(ExitCode::SUCCESS)
}

async fn demo(listen: SocketAddr, admin: Option<SocketAddr>) -> anyhow::Result<ExitCode> {
    init_logging(false);
    let upstream = ratelimit_proxy::echo::spawn("127.0.0.1:0".parse()?)
        .await
        .context("cannot start the echo upstream")?;
    let mut text = DEMO_CONFIG
        .replace("{LISTEN}", &listen.to_string())
        .replace("{UPSTREAM}", &upstream.to_string());
    if let Some(admin) = admin {
        text.push_str(&format!("\n[admin]\nlisten = \"{admin}\"\n"));
    }
    let config = ratelimit_proxy::config::parse_str(&text, "built-in demo config")?;
    let gateway = ratelimit_proxy::Gateway::bind(config).await?;
    let url = format!("http://{}", gateway.local_addrs()[0]);
    println!("ratelimit-proxy demo: {url} -> echo upstream at http://{upstream}");
    println!("  limits: 10 per 10 s per x-api-key (or per IP without one), 3 per minute on /login");
    println!(
        "  try: curl -i {url}/hello                      # see X-RateLimit-* and RateLimit headers"
    );
    println!(
        "       for i in $(seq 12); do curl -s -o /dev/null -w '%{{http_code}} ' {url}/hello; done"
    );
    println!(
        "       oha -z 10s -c 50 -H 'x-api-key: load' {url}/hello   # mostly 429: one key, 10 per 10 s"
    );
    if let Some(admin) = admin {
        println!(
            "  admin: curl http://{admin}/metrics   (also /healthz /readyz /config /debug/limited)"
        );
    }
    println!("  stop with Ctrl-C");
    log_exit(gateway.serve(shutdown_signal()).await?);
    Ok(ExitCode::SUCCESS)
}

async fn echo(listen: SocketAddr) -> anyhow::Result<ExitCode> {
    init_logging(false);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!("echo upstream on http://{}", listener.local_addr()?);
    ratelimit_proxy::echo::serve(listener, shutdown_signal()).await;
    Ok(ExitCode::SUCCESS)
}

/// The process's last line: how the drain ended and how long it took.
fn log_exit(drain: ratelimit_proxy::Drain) {
    tracing::info!(
        drain = drain.ended(),
        took_ms = drain.took.as_millis() as u64,
        cut = drain.cut,
        "exited"
    );
}

/// How often the config file and the files it names are checked for changes.
const CONFIG_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Reloads the config on every SIGHUP.
async fn reload_on_sighup(reloader: ratelimit_proxy::server::Reloader) {
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
async fn shutdown_signal() {
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
