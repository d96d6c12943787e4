//! The upstream client: pools and how a server is picked, health checks and ejection, idle
//! connection reuse, the own HTTP/1.1 client and its exchange errors, the fields a request
//! carries upstream, and tunnels after a 101.

pub(crate) mod background;
pub(crate) mod connections;
pub(crate) mod exchange;
pub(crate) mod headers;
pub(crate) mod health;
pub(crate) mod http1;
pub(crate) mod pool;
pub(crate) mod tunnel;
