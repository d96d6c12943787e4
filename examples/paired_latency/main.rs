//! A paired latency probe for benches/compare.sh's (f): added latency over direct-to-upstream
//! at a fixed request rate, with the direct requests sent in the same run, at the same
//! instants, as the proxied ones.
//!
//! Separate runs (oha against the proxy, then oha against the upstream) compare two samples of
//! a shared machine's stalls: here the direct p99 alone moved from 2.6 to 23 ms between runs,
//! so their difference measured the neighbours, not the proxy. This probe sends TARGET
//! requests open loop at RATE a second over CONNECTIONS keep-alive connections; at every
//! DIRECT_EVERY-th of those instants it also sends one to DIRECT. Both samples then share
//! every stall of the machine and of the probe itself, and what differs between them is the
//! proxy. Latency runs from each request's scheduled instant (as wrk2 and
//! `oha --latency-correction`), so a request that waited for a busy connection counts its wait.
//! tokio's timer counts milliseconds, so requests leave in bursts of RATE/1000 on each tick,
//! as oha's do; both requests of a pair wait for the same tick.
//!
//!   cargo run --release --example paired_latency -- --rate 15000 --seconds 8 \
//!       -H 'x-api-key: bench' http://127.0.0.1:PROXY/bench http://127.0.0.1:UPSTREAM/bench
//!
//! It prints one line of `key=value` fields (see `Report`) and exits 1 on any failed request
//! or answer not 2xx: such a run measures something else.

use std::time::Duration;

use clap::Parser;
use http::{HeaderName, HeaderValue, Uri};

mod probe;
mod report;

/// A paired latency probe: added latency of TARGET over DIRECT at a fixed rate.
#[derive(Parser)]
struct Args {
    /// Requests a second to TARGET, scheduled at even intervals.
    #[arg(long)]
    rate: u32,
    /// Measured seconds, after the warm-up.
    #[arg(long, default_value_t = 8)]
    seconds: u32,
    /// Seconds sent at the rate but not measured (connections open, caches fill).
    #[arg(long, default_value_t = 1)]
    warmup_seconds: u32,
    /// Keep-alive connections to TARGET; DIRECT gets this over DIRECT_EVERY (at least one).
    #[arg(long, default_value_t = 50)]
    connections: u32,
    /// One TARGET request in this many is paired with a DIRECT one at the same instant.
    #[arg(long, default_value_t = 10)]
    direct_every: u32,
    /// Seconds a request may take, connecting included, before the run fails.
    #[arg(long, default_value_t = 10)]
    timeout_seconds: u32,
    /// A header for every request, "name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_parser = parse_header)]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The proxy's URL (http://host:port/path).
    target: Uri,
    /// The upstream's URL, the same request without the proxy.
    direct: Uri,
}

fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("header \"{text}\": expected \"name: value\""))?;
    let name = HeaderName::try_from(name.trim())
        .map_err(|e| format!("header \"{text}\": bad name: {e}"))?;
    let value = HeaderValue::try_from(value.trim())
        .map_err(|e| format!("header \"{text}\": bad value: {e}"))?;
    Ok((name, value))
}

impl Args {
    fn plan(&self) -> Result<probe::Plan, String> {
        let positive = |value: u32, name: &str| match value {
            0 => Err(format!("--{name} is 0: expected 1 or more")),
            _ => Ok(value),
        };
        Ok(probe::Plan {
            target: probe::Endpoint::new(&self.target, &self.headers)?,
            direct: probe::Endpoint::new(&self.direct, &self.headers)?,
            rate: u64::from(positive(self.rate, "rate")?),
            warmup_ticks: u64::from(self.rate) * u64::from(self.warmup_seconds),
            measured_ticks: u64::from(self.rate) * u64::from(positive(self.seconds, "seconds")?),
            connections: positive(self.connections, "connections")?,
            direct_every: positive(self.direct_every, "direct-every")?,
            timeout: Duration::from_secs(positive(self.timeout_seconds, "timeout-seconds")?.into()),
        })
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let plan = match args.plan() {
        Ok(plan) => plan,
        Err(error) => {
            eprintln!("paired_latency: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    // One thread, as `wrk -t1`: the probe's own CPU stays small beside the proxy's.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("paired_latency: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(probe::run(&plan)) {
        Ok(samples) => {
            println!("{}", report::Report::from_samples(&samples));
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("paired_latency: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The integration tests' harness: the real gateway and in-process upstreams on loopback.
#[cfg(test)]
#[path = "../../tests/it/support/mod.rs"]
mod common;
#[cfg(test)]
mod tests;
