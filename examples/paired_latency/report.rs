//! What a run measured: each side's p50 and p99, the added p99 (TARGET's less DIRECT's, as
//! benches/compare.sh's oha runs define it), and the same quantiles of the pairs' own
//! differences, where a stall that delayed both requests of a pair cancels out.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use crate::probe::{Sample, Samples};

/// The 50th and 99th percentiles of `n` values (nearest rank), in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantiles {
    pub n: usize,
    pub p50: i64,
    pub p99: i64,
}

impl Quantiles {
    /// None for no values: a run with nothing measured has no percentiles.
    pub fn of(mut values: Vec<i64>) -> Option<Quantiles> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        Some(Quantiles {
            n: values.len(),
            p50: nearest_rank(&values, 50),
            p99: nearest_rank(&values, 99),
        })
    }
}

/// The smallest value with at least `percent` of the sorted, non-empty `values` at or below it.
fn nearest_rank(values: &[i64], percent: usize) -> i64 {
    let rank = (values.len() * percent).div_ceil(100).max(1);
    values[rank - 1]
}

fn nanos(latency: Duration) -> i64 {
    i64::try_from(latency.as_nanos()).unwrap_or(i64::MAX)
}

/// TARGET less DIRECT for every instant both were sent at.
pub fn paired_differences(samples: &Samples) -> Vec<i64> {
    let target: HashMap<u64, Duration> = samples
        .target
        .iter()
        .map(|sample| (sample.tick, sample.latency))
        .collect();
    samples
        .direct
        .iter()
        .filter_map(|direct| {
            let proxied = target.get(&direct.tick)?;
            Some(nanos(*proxied) - nanos(direct.latency))
        })
        .collect()
}

pub struct Report {
    pub target: Option<Quantiles>,
    pub direct: Option<Quantiles>,
    pub paired: Option<Quantiles>,
}

impl Report {
    pub fn from_samples(samples: &Samples) -> Report {
        let latencies = |side: &[Sample]| side.iter().map(|s| nanos(s.latency)).collect();
        Report {
            target: Quantiles::of(latencies(&samples.target)),
            direct: Quantiles::of(latencies(&samples.direct)),
            paired: Quantiles::of(paired_differences(samples)),
        }
    }
}

/// `name_n=… name_p50_ms=… name_p99_ms=…`, or `name_n=0` with no values.
fn write_side(f: &mut fmt::Formatter<'_>, name: &str, side: Option<Quantiles>) -> fmt::Result {
    match side {
        Some(q) => write!(
            f,
            "{name}_n={} {name}_p50_ms={:.3} {name}_p99_ms={:.3}",
            q.n,
            ms(q.p50),
            ms(q.p99)
        ),
        None => write!(f, "{name}_n=0"),
    }
}

fn ms(nanos: i64) -> f64 {
    nanos as f64 / 1e6
}

/// One line of `key=value` fields for the load scripts to read.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_side(f, "target", self.target)?;
        f.write_str(" ")?;
        write_side(f, "direct", self.direct)?;
        if let (Some(target), Some(direct)) = (self.target, self.direct) {
            write!(f, " added_p99_ms={:.3}", ms(target.p99 - direct.p99))?;
        }
        f.write_str(" ")?;
        write_side(f, "paired_added", self.paired)
    }
}
