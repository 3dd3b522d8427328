//! iomux: one event-loop API over select, poll, epoll (level- and
//! edge-triggered) and io_uring, chosen at run time.
//!
//! - [`poller`]: the readiness layer, one [`Poller`] per mechanism.
//! - [`sys`]: the only module that makes raw syscalls; each one is counted
//!   per thread ([`sys::counts`]).
#![deny(unsafe_code)]

pub mod error;
pub mod poller;
pub mod runtime;
pub mod sys;

pub use error::{Error, Result};
pub use poller::{Backend, Event, Events, Interest, Mode, Poller, Token, Waker};
pub use sys::{Syscall, SyscallCounts};
