//! iomux: one event-loop API over select, poll, epoll (level- and
//! edge-triggered) and io_uring, chosen at run time.
//!
//! - [`poller`]: the readiness layer, one [`Poller`] per mechanism.
//! - [`runtime`]: connections, timers and loops on top of it.
//! - [`syscalls`]: per-thread counters of every system call the library
//!   makes (all of them go through one private module).
#![deny(unsafe_code)]

pub mod error;
#[cfg(feature = "lab")]
pub mod lab;
pub mod poller;
pub mod runtime;
mod sys;
pub mod syscalls;

pub use error::{Error, Result};
pub use poller::{Backend, Event, Events, Interest, Mode, Poller, Token, Waker};
pub use syscalls::{Syscall, SyscallCounts};
