//! HTTP/1 pieces both the serving side and the upstream side use, as a leaf: this module
//! imports nothing from the rest of the gateway, so the config, the field containers and the
//! pipeline can all use it without importing one another. (More of the codec moves here with
//! the HTTP/1 layer issue; docs/ARCHITECTURE.md.)

pub mod connection;
pub mod encode;
pub mod fields;
pub mod framing;
mod head_error;
pub mod request_body;
pub mod request_fields;
pub mod request_head;
pub mod response_head;
pub mod stream;
pub mod upgrade;

pub use head_error::HeadError;
