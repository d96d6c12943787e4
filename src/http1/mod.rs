//! The HTTP/1 codec both the serving side and the upstream side use, as a leaf: this module
//! imports nothing from the rest of the gateway. It holds request heads read (`request_head`)
//! and written (`encode`), response heads read (`response_head`), the one body framing and
//! chunked decoder (`framing`), the one hop-by-hop definition and field names and values
//! (`fields`), the one keep-alive rule (`connection`), a request's fields (`request_fields`),
//! and the request body, upgrade and streams the server and client hand on. Where a head
//! becomes a gateway type (the server's request, the client's response fields), the caller
//! names the type through a small trait and it is built in place as the head is read.

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
