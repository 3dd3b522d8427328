//! The experiments, one file each (and the helpers only one of them uses):
//! each implements `harness::experiment::Experiment` and has one line in
//! `registry.rs`.

pub mod echo;
mod echo_large;
pub mod faults;
mod haproxy;
pub mod http;
pub mod http_clients;
pub mod idle;
mod nginx;
mod peer_cell;
pub mod peers;
pub mod proxy;
pub mod pubsub;
mod redis;
pub mod resp;
pub mod sink;
pub mod syscall_rate;
#[cfg(test)]
pub mod toy;
pub mod uring_features;
