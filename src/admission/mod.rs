//! Whether a request goes on (step 5 of the pipeline): the edge layer's per-IP buckets, the
//! limiter that evaluates a route's limits all-or-nothing over a store, approximate limits'
//! lease table and its sync task, and `admit`, which runs them in order and returns a refusal
//! as a value.

pub(crate) mod admit;
pub(crate) mod edge;
pub(crate) mod leases;
pub(crate) mod limiter;
pub(crate) mod refusal;
pub(crate) mod reservation;
pub(crate) mod seen;
pub(crate) mod shared;
