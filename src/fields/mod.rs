//! The fields of an answer's head, kept as head lines rather than a header map: the ones the
//! gateway adds (`added`) and an upstream's (`upstream`). Below both the upstream client,
//! which fills an upstream's, and `response`, which adds the gateway's; the servers write them.

pub(crate) mod added;
pub(crate) mod upstream;
