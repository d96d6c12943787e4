//! The HTTP/1 codec both the serving side and the upstream side use, as a leaf: this module
//! imports nothing from the rest of the gateway. It holds request heads read (`request_head`)
//! and written (`encode`), response heads read (`response_head`), the one body framing and
//! chunked decoder (`framing`), the one hop-by-hop definition and field names and values
//! (`fields`), sets of names looked up in any case (`name_set`), the one keep-alive rule
//! (`connection`), a request's fields (`request_fields`), and the request body, upgrade and
//! streams the server and client hand on. Where a head
//! becomes a gateway type (the server's request, the client's response fields), the caller
//! names the type through a small trait and it is built in place as the head is read.

pub(crate) mod connection;
pub(crate) mod encode;
pub(crate) mod fields;
pub(crate) mod framing;
mod head_error;
mod name_set;
pub(crate) mod request_body;
pub(crate) mod request_fields;
pub(crate) mod request_head;
pub(crate) mod response_head;
pub(crate) mod stream;
pub(crate) mod upgrade;

pub(crate) use head_error::HeadError;
pub(crate) use name_set::NameSet;
