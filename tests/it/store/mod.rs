mod approximate;
mod approximate_cluster;
mod cluster;
mod faults;
mod gateway;
mod lease_sync;
mod pipe;
mod redis_store;
