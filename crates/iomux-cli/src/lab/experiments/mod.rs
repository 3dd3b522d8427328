//! The experiments, one file or folder each (with the helpers only it uses):
//! each implements `harness::experiment::Experiment` and has one line in
//! `registry.rs`.

pub mod echo;
pub mod faults;
pub mod http;
pub mod idle;
pub mod peers;
pub mod proxy;
pub mod pubsub;
pub mod resp;
mod serving;
pub mod sink;
pub mod syscall_rate;
#[cfg(test)]
pub mod toy;
pub mod uring_features;

/// Whether one process on `backend` cannot watch `conns` connections:
/// select past FD_SETSIZE, its own few descriptors counted.
pub(crate) fn past_fd_setsize(backend: iomux::Backend, conns: usize) -> bool {
    backend == iomux::Backend::Select && conns + 8 > iomux::poller::FD_SETSIZE
}
