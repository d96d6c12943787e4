//! The config file as written: serde types that reject unknown keys. Values stay close to the
//! text (durations as strings) so `validate` can report every problem with its key path.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub upstreams: Vec<RawUpstream>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    // Sections of the contract that later work builds. They are accepted by the parser only so
    // that `validate` can say "not supported yet" instead of "unknown key".
    pub client_ip: Option<RawClientIp>,
    /// Name → inline array of CIDRs, or `{ file = "..." }`; interpreted in `network`.
    pub ip_lists: Option<toml::Table>,
    pub edge: Option<RawEdge>,
    pub admin: Option<RawAdmin>,
    pub store: Option<RawStore>,
    #[serde(default)]
    pub limits: Vec<RawLimit>,
    pub plans: Option<RawPlans>,
    pub response: Option<RawResponse>,
    pub log: Option<RawLog>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: Option<Vec<String>>,
    pub header_read_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub body_read_timeout: Option<String>,
    pub send_timeout: Option<String>,
    pub tunnel_idle_timeout: Option<String>,
    pub tunnel_send_timeout: Option<String>,
    pub max_connections: Option<i64>,
    pub max_header_bytes: Option<i64>,
    pub shutdown_grace: Option<String>,
    pub workers: Option<i64>,
    pub underscores_in_headers: Option<String>,
    pub escaped_slashes: Option<String>,
    pub allow_trace: Option<bool>,
    #[serde(default)]
    pub tls: Vec<RawTlsListener>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTlsListener {
    pub listen: String,
    pub certs: Vec<RawCertFiles>,
    pub min_version: Option<String>,
    pub handshake_timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCertFiles {
    pub cert: String,
    pub key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUpstream {
    pub name: String,
    pub servers: Vec<String>,
    pub balance: Option<String>,
    pub connect_timeout: Option<String>,
    pub response_timeout: Option<String>,
    pub read_timeout: Option<String>,
    pub reuse_after_body: Option<bool>,
    pub ejection_time: Option<String>,
    pub health_check: Option<RawHealthCheck>,
    pub ca_file: Option<String>,
    pub sni: Option<String>,
    pub tls_insecure_skip_verify: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealthCheck {
    pub path: String,
    pub interval: Option<String>,
    pub timeout: Option<String>,
    pub healthy_threshold: Option<i64>,
    pub unhealthy_threshold: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub name: String,
    pub host: Option<String>,
    pub path_prefix: Option<String>,
    pub methods: Option<Vec<String>>,
    pub case_sensitive: Option<bool>,
    pub upgrades: Option<Vec<String>>,
    pub upstream: String,
    pub limits: Option<Vec<String>>,
    pub cost: Option<i64>,
    pub max_in_flight: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub name: String,
    pub key: Vec<String>,
    pub missing: Option<String>,
    pub algorithm: Option<String>,
    pub rates: Vec<RawRate>,
    pub on_error: Option<String>,
    pub shadow: Option<bool>,
    pub action: Option<String>,
    pub max_delay: Option<String>,
    pub exempt_lists: Option<Vec<String>>,
    /// `"exact"` (default) or `"approximate"` (leases synced every `sync_interval`).
    pub consistency: Option<String>,
    pub sync_interval: Option<String>,
    /// Tier name → array of rates, or "unlimited"; interpreted in `limits`.
    pub tiers: Option<toml::Table>,
    pub charge: Option<RawCharge>,
}

/// `charge = { reserve, settle, statuses, refund }` of a limit; interpreted in `charge`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCharge {
    pub reserve: Option<i64>,
    /// A string, or an array of `json:` strings.
    pub settle: Option<toml::Value>,
    pub statuses: Option<Vec<toml::Value>>,
    pub refund: Option<Vec<toml::Value>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRate {
    pub limit: i64,
    pub per: String,
    pub burst: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlans {
    pub key: String,
    pub file: Option<String>,
    pub default: Option<String>,
    pub redis_hash: Option<String>,
    pub redis_ttl: Option<String>,
    /// `[{ list, tier }]`: an array, so that the first list holding an address wins in the
    /// order written (a TOML table's keys carry no order a reader must keep).
    pub lists: Option<Vec<RawTierList>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTierList {
    pub list: String,
    pub tier: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResponse {
    pub headers: Option<Vec<String>>,
    pub problem_type: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub backend: Option<String>,
    pub hash_secret: Option<String>,
    pub max_entries: Option<i64>,
    pub on_error: Option<String>,
    // Keys of the Redis backends.
    pub url: Option<String>,
    pub urls: Option<Vec<String>>,
    pub timeout: Option<String>,
    pub connect_timeout: Option<String>,
    pub key_prefix: Option<String>,
    pub fallback_instances: Option<i64>,
    pub ca_file: Option<String>,
    pub ready_requires_redis: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub format: Option<String>,
    pub access: Option<bool>,
    pub denied: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    pub listen: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClientIp {
    pub trusted_proxies: Option<Vec<String>>,
    pub header: Option<String>,
    pub ipv6_prefix: Option<i64>,
    pub remove_fields: Option<Vec<String>>,
    pub set_x_real_ip: Option<bool>,
    pub set_forwarded: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEdge {
    pub rate: String,
    pub burst: Option<i64>,
    pub max_tracked: Option<i64>,
    pub deny: Option<Vec<String>>,
    pub overrides: Option<Vec<RawEdgeOverride>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEdgeOverride {
    pub list: String,
    pub exempt: Option<bool>,
    pub rate: Option<String>,
    pub burst: Option<i64>,
}
