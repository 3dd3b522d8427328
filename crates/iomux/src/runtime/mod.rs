//! The connection layer: write a protocol once as a [`Handler`], run it on
//! any backend.
//!
//! - [`readiness`] drives select, poll and epoll (level or edge): a shared
//!   scratch buffer for reads, so an idle connection owns no buffer.
//! - [`completion`] drives io_uring natively: multishot accept, multishot
//!   receive into a provided-buffer ring, ordered sends, one
//!   `io_uring_enter` per loop turn.
//!
//! Both own buffers, partial writes, backpressure (a bounded output per
//! connection; a full one stops reading that connection) and closing
//! (half-close: when the peer stops sending, pending output is flushed and
//! then the connection closes).

mod completion;
mod readiness;
mod slab;
mod stats;
mod timers;

pub use stats::LoopStats;

use crate::error::{Error, Result};
use crate::poller::{Backend, Waker};
use crate::sys::net::{self, Fd};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A connection's name: a slab slot and a generation, so a stale id never
/// reaches a newer connection in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    index: u32,
    gen: u32,
}

impl ConnId {
    /// A number unique among the loop's live connections.
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
pub enum CloseReason {
    /// The peer stopped sending (EOF) and our output was flushed.
    PeerClosed,
    /// The handler called [`Io::close`] and the output was flushed.
    Local,
    /// The peer reset the connection.
    Reset,
    /// The loop is shutting down.
    Shutdown,
    /// An outbound connect failed.
    ConnectFailed(io::Error),
    /// Any other I/O error, naming the syscall.
    Error { syscall: &'static str, error: io::Error },
    /// The peer sent more than the input bound without the handler
    /// consuming it.
    InputLimit,
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

    /// Whether this is an orderly close (EOF, ours, or shutdown).
    pub fn is_clean(&self) -> bool {
        matches!(self, CloseReason::PeerClosed | CloseReason::Local | CloseReason::Shutdown)
    }
}

/// What a handler may do from its callbacks.
pub trait Io {
    /// The loop's clock, read once per turn.
    fn now(&self) -> Instant;
    /// Queues `data` on the connection's output, in order; sends at once
    /// when nothing is queued. Never drops bytes: the output may pass its
    /// bound by one write, and then the loop stops reading that connection
    /// until it drains. Returns false if the connection is gone.
    fn write(&mut self, conn: ConnId, data: &[u8]) -> bool;
    /// Output bytes queued and not yet sent.
    fn buffered(&self, conn: ConnId) -> usize;
    /// Calls [`Handler::on_drained`] once when the output is next empty.
    fn notify_drained(&mut self, conn: ConnId);
    /// Closes after the queued output is sent; reads nothing more.
    fn close(&mut self, conn: ConnId);
    /// Opens an outbound connection; [`Handler::on_open`] follows (or
    /// [`Handler::on_close`] with ConnectFailed). `source` binds a local
    /// address first (IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect).
    fn connect(&mut self, addr: SocketAddr, source: Option<IpAddr>) -> io::Result<ConnId>;
    /// Calls [`Handler::on_timer`] with `token` at or after `at`.
    fn set_timer(&mut self, at: Instant, token: u64);
    /// Stops the loop gracefully (as a signal would).
    fn stop(&mut self);
}

/// A protocol, written once for every backend.
pub trait Handler {
    /// The loop started: a client opens its first connections here.
    fn on_start(&mut self, _io: &mut dyn Io) {}
    /// A connection opened: accepted, or an outbound connect completed.
    fn on_open(&mut self, _io: &mut dyn Io, _conn: ConnId) {}
    /// Bytes arrived. Returns how many were consumed; the rest is handed
    /// back, with what arrives next, on the next call.
    fn on_data(&mut self, io: &mut dyn Io, conn: ConnId, data: &[u8]) -> usize;
    /// The output became empty after [`Io::notify_drained`].
    fn on_drained(&mut self, _io: &mut dyn Io, _conn: ConnId) {}
    /// The connection is closed; its id is dead from now on.
    fn on_close(&mut self, _io: &mut dyn Io, _conn: ConnId, _reason: &CloseReason) {}
    /// A timer set with [`Io::set_timer`] is due.
    fn on_timer(&mut self, _io: &mut dyn Io, _token: u64) {}
    /// An accepted connection was closed at once because the backend
    /// cannot watch it (select: fd number >= FD_SETSIZE).
    fn on_refused(&mut self, _error: &Error) {}
}

/// Tuning for a loop.
#[derive(Clone, Debug)]
pub struct Config {
    pub backend: Backend,
    /// Output bytes queued per connection before it stops being read.
    pub max_output: usize,
    /// Input bytes kept for a handler that does not consume them.
    pub max_input: usize,
    /// Connections at once per loop (None: as many as fds allow).
    pub max_conns: Option<usize>,
    /// Edge-triggered: reads per event before the connection goes to the
    /// back of the local ready list (fairness).
    pub read_budget: usize,
    /// The shared read buffer of a readiness loop.
    pub read_buffer: usize,
    /// io_uring: buffers in the provided-buffer ring (a power of two) and
    /// the size of each; the ring is the loop's whole receive memory.
    pub ring_buffers: u16,
    pub ring_buffer_size: usize,
    /// How long accepting pauses after EMFILE/ENFILE.
    pub accept_backoff: Duration,
    /// How long a graceful stop waits for output to drain.
    pub drain_timeout: Duration,
    /// How long a closing connection, its output sent and FIN sent, waits
    /// for the peer's EOF before it closes anyway.
    pub linger: Duration,
    /// Set TCP_NODELAY on outbound connections (listeners always set it,
    /// and accepted connections inherit it).
    pub nodelay: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            backend: Backend::Epoll,
            max_output: 4 << 20,
            max_input: 4 << 20,
            max_conns: None,
            read_budget: 16,
            read_buffer: 64 << 10,
            ring_buffers: 1024,
            ring_buffer_size: 4 << 10,
            accept_backoff: Duration::from_millis(50),
            drain_timeout: Duration::from_secs(5),
            linger: Duration::from_secs(2),
            nodelay: true,
        }
    }
}

/// Stops loops from another thread (a signal, a test): sets a flag and
/// wakes every registered loop.
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

    pub fn is_stopped(&self) -> bool {
        self.inner.stop.load(Ordering::SeqCst)
    }

    pub(crate) fn register(&self, waker: Waker) {
        if let Ok(mut w) = self.inner.wakers.lock() {
            w.push(waker);
        }
        // Registered after a stop: wake it too, or it would sleep on.
        if self.is_stopped() {
            if let Ok(w) = self.inner.wakers.lock() {
                if let Some(last) = w.last() {
                    let _ = last.wake();
                }
            }
        }
    }
}

/// Hands input to the handler: `data` alone when nothing is pending (no
/// copy), else `pending` with `data` appended. Unconsumed bytes stay in
/// `pending`. Returns true when they exceed `max_input`.
pub(crate) fn feed<H: Handler>(
    handler: &mut H,
    io: &mut dyn Io,
    id: ConnId,
    pending: &mut Vec<u8>,
    data: &[u8],
    max_input: usize,
) -> bool {
    if pending.is_empty() {
        let consumed = handler.on_data(io, id, data).min(data.len());
        pending.extend_from_slice(&data[consumed..]);
    } else {
        pending.extend_from_slice(data);
        let consumed = handler.on_data(io, id, pending).min(pending.len());
        pending.drain(..consumed);
    }
    pending.len() > max_input
}

/// Runs one loop on this thread until `control` stops it (and, when the
/// loop has no listener, until the handler has nothing left to do).
pub fn run_loop<H: Handler>(
    config: &Config,
    listener: Option<Fd>,
    handler: &mut H,
    control: &Control,
) -> Result<LoopStats> {
    match config.backend {
        Backend::Uring | Backend::UringSqpoll => completion::run(config, listener, handler, control),
        _ => readiness::run(config, listener, handler, control),
    }
}

/// Listeners bound for `threads` loops (SO_REUSEPORT when more than one).
pub struct Listeners {
    fds: Vec<Fd>,
    local_addr: SocketAddr,
}

impl Listeners {
    pub fn bind(addr: SocketAddr, threads: usize) -> Result<Listeners> {
        let threads = threads.max(1);
        let reuse_port = threads > 1;
        let sys_err =
            |syscall: &'static str, e: io::Error| Error::Sys { backend: "listen", syscall, fd: None, source: e };
        let first = net::tcp_listener(&addr, reuse_port, 4096).map_err(|e| {
            let what = match e.raw_os_error() {
                Some(libc::EADDRINUSE) => "bind (address in use: another server is listening there)",
                Some(libc::EADDRNOTAVAIL) => "bind (no such local address)",
                Some(libc::EACCES) => "bind (a port below 1024 needs privileges)",
                _ => "bind",
            };
            sys_err(what, e)
        })?;
        // Port 0 binds the first listener to a free port; the others join it.
        let local_addr = net::local_addr(first.raw()).map_err(|e| sys_err("getsockname", e))?;
        let mut fds = vec![first];
        for _ in 1..threads {
            fds.push(net::tcp_listener(&local_addr, true, 4096).map_err(|e| sys_err("bind", e))?);
        }
        Ok(Listeners { fds, local_addr })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Runs one loop per listener, each on its own thread with its own
    /// handler (share-nothing), and merges their stats.
    pub fn serve<H, F>(self, config: &Config, make_handler: F, control: &Control) -> Result<LoopStats>
    where
        H: Handler,
        F: Fn(usize) -> H + Sync,
    {
        let results: Vec<Result<LoopStats>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .fds
                .into_iter()
                .enumerate()
                .map(|(i, fd)| {
                    let make_handler = &make_handler;
                    let config = config.clone();
                    let control = control.clone();
                    std::thread::Builder::new()
                        .name(format!("iomux-loop-{i}"))
                        .spawn_scoped(scope, move || {
                            let mut handler = make_handler(i);
                            let result = run_loop(&config, Some(fd), &mut handler, &control);
                            if result.is_err() {
                                // One loop failing stops the others too.
                                control.stop();
                            }
                            result
                        })
                        .map_err(|e| Error::Sys {
                            backend: "serve",
                            syscall: "clone (spawn thread)",
                            fd: None,
                            source: e,
                        })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        Err(Error::Sys {
                            backend: "serve",
                            syscall: "join",
                            fd: None,
                            source: io::Error::other("a loop thread panicked"),
                        })
                    }),
                    Err(e) => Err(e),
                })
                .collect()
        });
        let mut total = LoopStats::default();
        for r in results {
            total.merge(&r?);
        }
        Ok(total)
    }
}
