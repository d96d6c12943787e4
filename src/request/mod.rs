//! What a request is, before anything is decided about it: its canonical form (step 2 of the
//! pipeline), the client address behind trusted proxies and the CIDR sets that decide it, the
//! fields naming the client that go upstream, its X-Request-Id, and the route it matches.

pub(crate) mod canonical;
pub(crate) mod client_fields;
pub(crate) mod client_ip;
pub(crate) mod id;
pub(crate) mod ip_set;
pub(crate) mod route;
