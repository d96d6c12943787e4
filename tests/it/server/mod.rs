mod access_log;
mod client_deadlines;
mod client_ip_edge;
mod connections;
mod http1;
mod http1_bodies;
mod shutdown;
mod tls;
