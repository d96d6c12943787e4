//! `rlp_log_lines_dropped_total{reason}`: log lines the queue dropped (`rt::log_queue`), read
//! from its counters at every scrape. Both reasons are always exported, from 0.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;

use crate::rt::log_queue::{DropReason, dropped};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug)]
struct LogDropsCollector;

impl Collector for LogDropsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "rlp_log_lines_dropped",
            "Log lines not written, by reason: queue_full (the log reader is slower than the \
             lines come, or stalled) or write_failed (a full disk, a closed pipe)",
            None,
            MetricType::Counter,
        )?;
        for reason in DropReason::ALL {
            let label = ReasonLabel {
                reason: reason.label(),
            };
            ConstCounter::new(dropped(reason)).encode(family.encode_family(&label)?)?;
        }
        Ok(())
    }
}

pub(super) fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(LogDropsCollector));
}
