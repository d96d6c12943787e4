//! The gateway's own plumbing, read from process-wide counters at every scrape, every series
//! from 0: `rlp_log_lines_dropped_total{reason}` (lines the log queue dropped, `rt::log_queue`)
//! and `rlp_resource_exhausted_total{resource,site}` (local shortages met, `rt::shortage`).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;

use crate::rt::log_queue::{DropReason, dropped};
use crate::rt::shortage::{Shortage, Site, met};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShortageLabels {
    resource: &'static str,
    site: &'static str,
}

#[derive(Debug)]
struct PlumbingCollector;

impl Collector for PlumbingCollector {
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
        let mut family = encoder.encode_descriptor(
            "rlp_resource_exhausted",
            "Operations that failed for lack of a local resource (file descriptors, memory, \
             socket buffers), by where: accept, admin_accept, upstream_connect (a 503, and the \
             server is not ejected)",
            None,
            MetricType::Counter,
        )?;
        for site in Site::ALL {
            for resource in Shortage::ALL {
                let labels = ShortageLabels {
                    resource: resource.label(),
                    site: site.label(),
                };
                ConstCounter::new(met(site, resource)).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

pub(super) fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(PlumbingCollector));
}
