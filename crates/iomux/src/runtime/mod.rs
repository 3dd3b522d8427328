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
//! - when the peer shuts down its side, [`Handler::on_read_closed`] is
//!   told; by default it shuts ours down after the output
//!   ([`Io::shutdown_write`]), and with both sides shut the connection
//!   closes ([`CloseReason::PeerClosed`]); a relay keeps reading the
//!   other way instead, each direction ending on its own;
//! - no [`Handler::on_data`] call is offered more than
//!   [`ConfigBuilder::read_buffer`] new bytes, whatever the backend
//!   received at once (unless the handler asked for more by consuming
//!   none of what it was offered);
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
mod layer;
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
pub use layer::{Layer, LayerEvents};
pub use messages::{Sender, TrySendError};
pub use stats::{LoopStats, UringFeature};
pub use timers::TimerId;

use crate::poller::Waker;
#[cfg(doc)]
use crate::syscalls::Syscall;
use crate::Error;
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

/// Why a connection closed, as [`Handler::on_close`] hears it. Every
/// error it carries is the crate's [`Error`], naming the backend, the
/// descriptor and the call.
///
/// ```
/// use iomux::runtime::CloseReason;
///
/// assert_eq!(CloseReason::PeerClosed.to_string(), "closed by both sides in order");
/// assert!(CloseReason::PeerClosed.is_clean() && !CloseReason::Reset.is_clean());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CloseReason {
    /// Both directions ended in order: the peer's end of input came
    /// ([`Handler::on_read_closed`]) and our FIN went out after all our
    /// output ([`Io::shutdown_write`], which the default
    /// `on_read_closed` calls).
    PeerClosed,
    /// The handler called [`Io::close`] and the output was flushed.
    Local,
    /// The peer reset the connection.
    Reset,
    /// The loop is stopping.
    Shutdown,
    /// An outbound connect failed, at once (no socket could be made, a
    /// Unix socket's path does not exist, the loop is stopping) or later
    /// (refused, unreachable): either way only through
    /// [`Handler::on_close`].
    ConnectFailed(Error),
    /// An outbound connect did not complete within
    /// [`ConfigBuilder::connect_timeout`].
    ConnectTimeout,
    /// Any other I/O error. Its syscall is the one made on the readiness
    /// backends, and on io_uring the ring's operation of that kind: a
    /// receive is [`Syscall::Recvfrom`], a send [`Syscall::Sendto`],
    /// gathered or not, on every backend.
    Error(Error),
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
    /// The handler reset the connection ([`Io::abort`]): its queued
    /// output was dropped and the peer got a reset.
    Aborted,
    /// The connection's [`Layer`] did not complete its handshake within
    /// [`ConfigBuilder::handshake_timeout`].
    HandshakeTimeout,
    /// The connection's [`Layer`] refused the peer's bytes (a TLS alert
    /// went out first, if the layer made one) or the handler's, or the
    /// peer's input ended where the layer does not allow it.
    Layer(Error),
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

    /// The error behind the close, if one is ([`CloseReason::Error`],
    /// [`CloseReason::ConnectFailed`], [`CloseReason::Unwatchable`],
    /// [`CloseReason::Layer`]).
    pub fn error(&self) -> Option<&Error> {
        match self {
            CloseReason::ConnectFailed(e)
            | CloseReason::Error(e)
            | CloseReason::Unwatchable(e)
            | CloseReason::Layer(e) => Some(e),
            _ => None,
        }
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let said = match self {
            CloseReason::PeerClosed => "closed by both sides in order",
            CloseReason::Local => "closed by the handler",
            CloseReason::Reset => "reset by the peer",
            CloseReason::Shutdown => "closed by the loop's stop",
            // Its error names the call: "epoll: connect on fd 8 failed".
            CloseReason::ConnectFailed(e) => return write!(f, "{e}{}", cause(e)),
            CloseReason::ConnectTimeout => "connect timed out",
            CloseReason::Error(e) => return write!(f, "{e}{}", cause(e)),
            CloseReason::InputLimit => "the peer sent more than max_input unconsumed",
            CloseReason::CloseTimeout => "the peer did not take the output left at close in time",
            CloseReason::Unwatchable(e) => return write!(f, "no longer watchable: {e}{}", cause(e)),
            CloseReason::PeerVanished => "the peer vanished (keepalive or user timeout)",
            CloseReason::Idle => "closed as idle",
            CloseReason::Aborted => "reset by the handler",
            CloseReason::HandshakeTimeout => "the layer's handshake timed out",
            CloseReason::Layer(e) => return write!(f, "{e}"),
        };
        f.write_str(said)
    }
}

/// ": the kernel's words" for an error with a source, else nothing: a
/// close reason is a leaf, printed whole.
fn cause(e: &Error) -> String {
    std::error::Error::source(e).map(|s| format!(": {s}")).unwrap_or_default()
}

/// Stops loops from any thread (a signal, a test): sets a flag and wakes
/// every loop that uses it. Cheap to clone.
#[derive(Clone, Default)]
pub struct Control {
    inner: Arc<ControlInner>,
}

#[derive(Default)]
struct ControlInner {
    /// Shared with the signal handlers of [`Runtime::stop_on_signals`].
    stop: Arc<AtomicBool>,
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

    /// The flag [`Control::stop`] sets, for a signal's handler to set.
    pub(crate) fn stop_flag(&self) -> Arc<AtomicBool> {
        self.inner.stop.clone()
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
