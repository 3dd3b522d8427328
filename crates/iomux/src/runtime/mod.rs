//! The connection layer: write a protocol once as a [`Handler`], run it on
//! any backend with the same observable behaviour.
//!
//! One core holds every connection's state machine (output and its bound,
//! backpressure, partial input, half-close, closing with output pending,
//! lingering close, timers, graceful stop, accept limits and back-off);
//! two thin drivers turn the kernel's mechanism into events for it:
//!
//! - the readiness driver runs select, poll and epoll (level or edge),
//!   reading into one scratch buffer per loop, so an idle connection owns
//!   no buffer;
//! - the completion driver runs io_uring natively: multishot accept,
//!   multishot receive into a provided-buffer ring, ordered sends, one
//!   `io_uring_enter` per loop turn (none at all with SQPOLL when busy).
//!
//! [`Runtime`] runs N share-nothing loops, for servers and clients alike.
//!
//! Semantics every backend keeps:
//! - bytes written with [`Io::write`] go out in order, and none is dropped;
//!   a connection whose output passes [`ConfigBuilder::max_output`] is not
//!   read until it drains to half of it (TCP then holds the peer back);
//! - when the peer shuts down its side, the output is flushed, then the
//!   connection closes ([`CloseReason::PeerClosed`]);
//! - [`Io::close`] with output pending: nothing more is delivered and the
//!   connection is not read; once the output is out, FIN is sent and input
//!   is discarded until the peer's EOF (or the linger time), so the close
//!   never becomes a reset that destroys output the peer has not read;
//! - a stop ([`Control::stop`], [`Io::stop`], SIGINT/SIGTERM with
//!   [`Runtime::stop_on_signals`]) stops accepting, closes idle
//!   connections, flushes the others for at most the drain timeout.

mod completion;
mod config;
mod core;
mod handler;
mod io;
mod launch;
mod messages;
mod readiness;
mod slab;
mod stats;
mod timers;
mod uring_features;

/// The `bytes` crate's shared buffer, which [`Io::write_bytes`] queues
/// without a copy (re-exported so a handler needs no other dependency).
pub use bytes::Bytes;
pub use config::{Config, ConfigBuilder, Keepalive};
pub use handler::Handler;
pub use io::Io;
pub use launch::{Finished, Runtime};
pub use messages::Sender;
pub use stats::{LoopStats, UringFeature};
pub use timers::TimerId;

use crate::poller::Waker;
use crate::syscalls::Syscall;
use crate::Error;
use std::io as stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A connection's name: a slab slot and a generation, so a stale id never
/// reaches a newer connection in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    index: u32,
    gen: u32,
}

impl ConnId {
    /// A number unique among the loop's connections, past and present.
    pub fn as_u64(self) -> u64 {
        (u64::from(self.gen) << 32) | u64::from(self.index)
    }
    /// The inverse of [`ConnId::as_u64`].
    pub fn from_u64(v: u64) -> ConnId {
        ConnId { index: v as u32, gen: (v >> 32) as u32 }
    }
}

/// Why a connection closed.
#[derive(Debug)]
#[non_exhaustive]
pub enum CloseReason {
    /// The peer stopped sending (EOF) and our output was flushed.
    PeerClosed,
    /// The handler called [`Io::close`] and the output was flushed.
    Local,
    /// The peer reset the connection.
    Reset,
    /// The loop is stopping.
    Shutdown,
    /// An outbound connect failed.
    ConnectFailed(stdio::Error),
    /// Any other I/O error, naming the syscall (on io_uring, the ring's
    /// operation of that kind: a receive is [`Syscall::Recvfrom`], a send
    /// [`Syscall::Sendto`], gathered or not, on every backend).
    Error {
        /// The call that failed.
        syscall: Syscall,
        /// What the kernel said.
        error: stdio::Error,
    },
    /// The peer sent more than [`ConfigBuilder::max_input`] without the
    /// handler consuming it.
    InputLimit,
    /// After [`Io::close`], the peer did not take the queued output within
    /// [`ConfigBuilder::close_timeout`].
    CloseTimeout,
    /// The backend could not watch the connection any more (its poller
    /// refused a change of interest).
    Unwatchable(Error),
    /// The kernel gave up on the peer: TCP keepalive's probes went
    /// unanswered ([`ConfigBuilder::keepalive`]), or output stayed
    /// unacknowledged for [`ConfigBuilder::user_timeout`] (ETIMEDOUT), or
    /// a router reported it unreachable (EHOSTUNREACH, ENETUNREACH,
    /// EHOSTDOWN), on any backend. With a user timeout this also ends a
    /// peer that is there but has not read for that long (its receive
    /// window stayed shut).
    PeerVanished,
    /// The handler closed the connection as idle ([`Io::close_idle`]),
    /// and the output was flushed.
    Idle,
}

impl CloseReason {
    /// Why a connection we are closing closes: the loop's stop, or ours.
    pub(crate) fn closing(shutting_down: bool) -> CloseReason {
        if shutting_down {
            CloseReason::Shutdown
        } else {
            CloseReason::Local
        }
    }

    /// Whether this is an orderly close (EOF, ours, or a stop).
    pub fn is_clean(&self) -> bool {
        matches!(self, CloseReason::PeerClosed | CloseReason::Local | CloseReason::Shutdown | CloseReason::Idle)
    }
}

/// Stops loops from any thread (a signal, a test): sets a flag and wakes
/// every loop that uses it. Cheap to clone.
#[derive(Clone, Default)]
pub struct Control {
    inner: Arc<ControlInner>,
}

#[derive(Default)]
struct ControlInner {
    stop: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl Control {
    /// A control that has not stopped anything yet.
    pub fn new() -> Control {
        Control::default()
    }

    /// Asks every loop to stop gracefully.
    pub fn stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        let wakers = self.inner.wakers.lock().map(|w| w.clone()).unwrap_or_default();
        for w in wakers {
            // A loop that already exited has nothing to wake.
            let _ = w.wake();
        }
    }

    /// Whether [`Control::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stop.load(Ordering::SeqCst)
    }

    pub(crate) fn register(&self, waker: Waker) {
        if let Ok(mut w) = self.inner.wakers.lock() {
            w.push(waker.clone());
        }
        // Registered after a stop: wake it too, or it would sleep on.
        if self.is_stopped() {
            let _ = waker.wake();
        }
    }
}
