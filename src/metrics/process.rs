//! The process itself: `rlp_build_info{version,commit}` (always 1, for joins and for seeing
//! a rollout), and the standard Prometheus process metrics under client_golang's names
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`), read from `/proc` when scraped. Linux
//! only: elsewhere the collector is not registered and those names are absent. A file that
//! cannot be read leaves out its metrics, never the scrape.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::build_info;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// Registers `rlp_build_info` and, on Linux, the process collector.
pub(super) fn register(registry: &mut Registry) {
    let build = Family::<BuildLabels, Gauge>::default();
    let labels = BuildLabels {
        version: build_info::VERSION,
        commit: build_info::COMMIT,
    };
    build.get_or_create(&labels).set(1);
    registry.register(
        "rlp_build_info",
        "The version and commit the gateway was built from (always 1)",
        build,
    );
    if cfg!(target_os = "linux") {
        registry.register_collector(Box::new(ProcessCollector));
    }
}

/// Clock ticks per second in `/proc/*/stat` (USER_HZ): fixed at 100 in the Linux ABI of every
/// architecture this builds for, and what client_golang's procfs assumes too.
const TICKS_PER_SECOND: f64 = 100.0;

/// Reads `/proc/self` on every scrape.
#[derive(Debug, Default)]
pub(super) struct ProcessCollector;

/// One reading of the process; a field is None when its source could not be read.
#[derive(Debug, Default, PartialEq)]
struct ProcessReading {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
    start_time_seconds: Option<f64>,
}

impl ProcessReading {
    fn read() -> ProcessReading {
        let proc_file = |path| std::fs::read_to_string(path).ok();
        let stat = proc_file("/proc/self/stat").and_then(|text| parse_stat(&text));
        let boot_time = proc_file("/proc/stat").and_then(|text| boot_time(&text));
        ProcessReading {
            cpu_seconds: stat.map(|stat| stat.cpu_ticks as f64 / TICKS_PER_SECOND),
            resident_bytes: proc_file("/proc/self/status").and_then(|text| resident_bytes(&text)),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|entries| entries.count() as u64),
            max_fds: proc_file("/proc/self/limits").and_then(|text| max_open_files(&text)),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(stat, boot)| boot as f64 + stat.start_ticks as f64 / TICKS_PER_SECOND),
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let reading = ProcessReading::read();
        let encoder = &mut encoder;
        if let Some(seconds) = reading.cpu_seconds {
            let help = "Total user and system CPU time spent in seconds.";
            encode(
                encoder,
                "process_cpu_seconds",
                help,
                ConstCounter::new(seconds),
            )?;
        }
        let counts = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                reading.resident_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                reading.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                reading.max_fds,
            ),
        ];
        for (name, help, value) in counts {
            if let Some(value) = value {
                encode(encoder, name, help, ConstGauge::new(value as i64))?;
            }
        }
        if let Some(started) = reading.start_time_seconds {
            let help = "Start time of the process since unix epoch in seconds.";
            encode(
                encoder,
                "process_start_time_seconds",
                help,
                ConstGauge::new(started),
            )?;
        }
        Ok(())
    }
}

fn encode(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: impl EncodeMetric,
) -> Result<(), fmt::Error> {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Stat {
    /// utime + stime.
    cpu_ticks: u64,
    /// When the process started, in ticks after boot.
    start_ticks: u64,
}

/// `/proc/self/stat`: fields 14 and 15 (utime, stime) and 22 (starttime). The command name
/// (field 2) is in parentheses and may hold spaces and parentheses, so fields are counted from
/// the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let after_name = &text[text.rfind(')')? + 1..];
    // The first field after the name is field 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
    })
}

/// `btime` of `/proc/stat`: when the machine booted, in seconds since the epoch.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// `VmRSS` of `/proc/self/status`, given in kB (KiB).
fn resident_bytes(text: &str) -> Option<u64> {
    let value = text.lines().find_map(|line| line.strip_prefix("VmRSS:"))?;
    let kib: u64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit of "Max open files" in `/proc/self/limits`; None when unlimited.
fn max_open_files(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (rlp (worker) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    250 50 0 0 20 0 3 0 123456 1000000 500 18446744073709551615";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 123456
            })
        );
        assert_eq!(parse_stat("4242 (truncated) S 1"), None);
    }

    #[test]
    fn status_limits_and_boot_time_are_read_in_their_units() {
        let status = "Name:\tratelimit-proxy\nVmPeak:\t  20000 kB\nVmRSS:\t   12345 kB\n";
        assert_eq!(resident_bytes(status), Some(12345 * 1024));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             95737                95737                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(max_open_files(unlimited), None);
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1700000000)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_every_value_with_plausible_numbers() {
        let reading = ProcessReading::read();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = reading.start_time_seconds.unwrap();
        // Started before now (a second of slack for the ticks' rounding), and not long ago.
        assert!(
            started <= now + 1.0 && started > now - 86400.0 * 365.0,
            "{started} vs {now}"
        );
        assert!(reading.cpu_seconds.unwrap() >= 0.0);
        assert!(reading.resident_bytes.unwrap() > 1024 * 1024);
        let (open, max) = (reading.open_fds.unwrap(), reading.max_fds.unwrap());
        assert!(open >= 3 && open <= max, "{open} of {max}");
    }
}
