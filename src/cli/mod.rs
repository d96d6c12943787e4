//! The `ratelimit-proxy` command: serve a config (reloading it on SIGHUP and when its files
//! change), check one, run the demo, ask a running gateway's health. `main.rs` only calls
//! `main` here. The only place that uses `anyhow`: every other error is typed.

/// `println!` and `eprintln!` without their panic: a stdout or stderr that cannot be written
/// (a full disk, a closed pipe) loses the line instead of stopping the process.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod check;
mod demo;
pub(crate) mod echo;
pub(crate) mod health;
mod logging;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// An edge reverse proxy that sheds abusive traffic before it reaches an API.
#[derive(Parser)]
#[command(version = crate::build_info::VERSION_AND_COMMIT, about)]
pub(crate) struct Cli {
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
        #[arg(long, default_value = "2s", value_parser = crate::config::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Run only the echo upstream (used by the load scripts under benches/).
    #[command(hide = true)]
    Echo {
        #[arg(long)]
        listen: SocketAddr,
    },
}

/// Runs the command the arguments name, and says how it ended.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Check { strict }) => check::check(cli.config, strict),
        Some(Command::Health { admin, timeout }) => health::health(admin, cli.config, timeout),
        Some(Command::Demo { .. }) if cli.config.is_some() => Err(anyhow::anyhow!(
            "demo serves its own built-in config and takes no --config: serve yours with `ratelimit-proxy --config FILE`"
        )),
        command => run_async(command, cli.config),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            logging::flush_at_exit(); // the lines logged before it, first
            say_err!("error: {error:#}");
            ExitCode::FAILURE
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
            Some(Command::Demo { listen, admin }) => demo::demo(listen, admin).await,
            Some(Command::Echo { listen }) => demo::echo(listen).await,
            _ => serve::serve(config).await,
        }
    })
}
