//! The label sets of the metrics, and label values escaped as the text format needs.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::edge::EdgeVerdict;

/// A label value from the config (a route's, upstream's or limit's name, a server's address),
/// escaped as the text format requires: prometheus-client writes label values as they are, and
/// one quote, backslash or newline in a name would make the whole scrape unreadable.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct LabelText(String);

impl From<&str> for LabelText {
    fn from(text: &str) -> LabelText {
        LabelText(text.to_string())
    }
}

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteCode {
    pub route: LabelText,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    pub route: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitDecisionLabels {
    pub limit: LabelText,
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabel {
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamCode {
    pub upstream: LabelText,
    pub code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabel {
    pub upstream: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabel {
    pub backend: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendKind {
    pub backend: &'static str,
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    /// A Redis node's `host:port`.
    pub node: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamServerLabels {
    pub upstream: LabelText,
    pub server: LabelText,
}

/// The `decision` label of `rlp_edge_decisions_total`.
#[derive(Clone, Copy)]
pub enum EdgeDecision {
    Allowed,
    Exempt,
    Forbidden,
    Denied,
}

impl EdgeDecision {
    pub(super) const COUNT: usize = 4;

    pub fn of(verdict: &EdgeVerdict) -> EdgeDecision {
        match verdict {
            EdgeVerdict::Allow => EdgeDecision::Allowed,
            EdgeVerdict::Exempt => EdgeDecision::Exempt,
            EdgeVerdict::Forbidden { .. } => EdgeDecision::Forbidden,
            EdgeVerdict::Limited { .. } => EdgeDecision::Denied,
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            EdgeDecision::Allowed => "allowed",
            EdgeDecision::Exempt => "exempt",
            EdgeDecision::Forbidden => "forbidden",
            EdgeDecision::Denied => "denied",
        }
    }
}
