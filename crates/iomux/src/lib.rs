//! iomux: one event-loop API over select, poll, epoll (level- and
//! edge-triggered) and io_uring, chosen at run time, with the same
//! observable behaviour on every mechanism.
//!
//! # Layers
//!
//! - [`runtime`]: write a protocol once as a [`runtime::Handler`] (callbacks
//!   for accept, data, drained output, close, timers, deadlines and
//!   messages from other loops, each with the
//!   connection's own state) and run it on N loops with
//!   [`runtime::Runtime`]. One core owns every connection's state machine
//!   (output bound and backpressure, partial input, half-close, close with
//!   output pending, lingering close, accept limits, graceful stop); two
//!   thin drivers feed it, one for readiness mechanisms and one for
//!   io_uring's completions.
//! - [`poller`]: the readiness layer underneath, one [`Poller`] per
//!   mechanism with one documented contract (level, edge, oneshot).
//! - Syscall counters ([`Syscall`], [`SyscallCounts`]): every syscall the
//!   library makes is counted per thread, so "syscalls per message" needs
//!   no strace.
//!
//! # Which backend
//!
//! Figures from this project's lab (`iomux bench`) on a 2-vCPU VM, Linux
//! 6.18; re-measure on your machine with `cargo run --release -- bench`.
//!
//! - **epoll** (the default) for almost everything: an empty wait costs
//!   the same with 1 or 19,979 registered descriptors (about 11 million
//!   waits/s), and 10,240 idle connections do not slow the active ones.
//!   Level-triggered (`epoll`) and edge-triggered (`epoll-et`) make the
//!   same syscalls per echo (about 2.1: read, write and a share of one
//!   wait); edge-triggered saves re-reporting under bulk transfers.
//! - **uring** when syscalls dominate: the completion driver needs about
//!   0.12-0.14 syscalls per 100-byte echo where epoll needs 2.05-2.13
//!   (2,000 connections; 0.03 against 2.06 at 19,000), because receives are multishot into a
//!   shared buffer ring and one `io_uring_enter` submits and waits for a
//!   whole turn. **uring-sqpoll** moves submission to a kernel thread,
//!   which costs a CPU of its own while busy. io_uring's newer features
//!   are [`runtime::Config`] switches, each probed at start and reported
//!   in [`runtime::LoopStats::uring_features`]; `iomux bench
//!   uring-features` measures what each buys on your kernel.
//! - **poll** and **select** for portability and small counts only: their
//!   cost grows with every registered descriptor (poll: about 2,300 empty
//!   waits/s at 19,979 descriptors; 80x slower with 10,240 idle
//!   connections), and select cannot watch a descriptor numbered 1024 or
//!   more at all.
//!
//! Memory: an idle connection costs about 80 bytes of user space on epoll
//! and io_uring alike (no per-connection receive buffer on either).
//!
//! # Input, output and backpressure
//!
//! [`runtime::Handler::on_data`] returns how many bytes it consumed. What
//! it leaves after consuming some is offered again at once, so a handler
//! may answer one request per call and still serve a pipelining client;
//! what it leaves after consuming none waits for more bytes. A
//! connection's output ([`runtime::Io::write`]) may pass
//! [`runtime::ConfigBuilder::max_output`] by one write: then the loop stops
//! reading it and offers it nothing more until the output drains to half
//! the bound, and then offers the input it held back without waiting for
//! new bytes. A handler can pause and resume reading itself
//! ([`runtime::Io::pause_reading`], [`runtime::Io::resume_reading`]), for
//! example while it waits on another connection. Every backend behaves the
//! same way (crates/iomux/tests/runtime.rs runs each case on all six).
//!
//! No `on_data` call is offered more than
//! [`runtime::ConfigBuilder::read_buffer`] new bytes (64 KiB by default),
//! on any backend, whatever the kernel delivered at once; a handler that
//! consumes none of a slice is offered it again with more, so a request
//! of any size still reaches it whole.
//!
//! # Two connections: relays, proxies, half-close
//!
//! A handler may open connections too ([`runtime::Io::connect`], or
//! [`runtime::Io::connect_unix`] for a Unix stream socket; a failure, at
//! once or later, or past [`runtime::ConfigBuilder::connect_timeout`],
//! comes to `on_close`), and tie them together:
//!
//! - **half-close**: a peer's end of input is its own event
//!   ([`runtime::Handler::on_read_closed`]); by default it shuts our side
//!   down after the output ([`runtime::Io::shutdown_write`]), and a relay
//!   passes it on to the other connection instead, so each direction
//!   ends on its own;
//! - **backpressure across connections**: pause the sender
//!   ([`runtime::Io::pause_reading`]) while the receiver's queued output
//!   is high, and resume it when [`runtime::Io::notify_below`] says it
//!   fell to a low-water mark ([`runtime::Io::is_full`] tells whether a
//!   connection is at its own bound);
//! - **reset**: [`runtime::Io::abort`] drops the queued output and resets
//!   the peer, to pass a reset on;
//! - **splice**: [`runtime::Io::splice`] relays one connection's input to
//!   another inside the kernel (splice(2) through a pipe), never copied to
//!   user space, bounded by the pipe, for a proxy's bulk data.
//!
//! `examples/proxy.rs` is a TCP proxy in a hundred lines, half-closing and
//! bounded each way; a server may also listen on a Unix socket
//! ([`runtime::Runtime::bind_unix`]).
//!
//! There are three ways to write: [`runtime::Io::write`] copies a slice;
//! [`runtime::Io::write_with`] serializes straight into the output;
//! [`runtime::Io::write_bytes`] queues a shared buffer
//! ([`runtime::Bytes`]) without copying it, and the loop sends it with
//! what was written around it in gathered sends (`sendmsg`, or
//! IORING_OP_SENDMSG). `iomux serve --proto resp` answers a GET of a
//! large value that way: forty pipelined GETs of a 3 MB value grow its
//! memory by less than half the value on every backend (0 to 135 KB
//! measured; crates/iomux-cli/tests/resp.rs), where one copy per
//! reply would take 3 MB each.
//!
//! # State across loops
//!
//! Each loop runs on its own thread (a lone loop on the calling thread)
//! with its own handler, so state lives in one of two places:
//!
//! - **Shared behind a lock** (an `Arc<Mutex<_>>` the handlers clone):
//!   right when every loop needs the same data and each use is short, as
//!   with `iomux serve --proto resp`'s one keyspace. An uncontended or
//!   lightly contended lock costs tens of nanoseconds.
//! - **Owned by one loop and routed to it** with messages: one
//!   [`runtime::Sender`] per loop from [`runtime::Runtime::senders`],
//!   handled in [`runtime::Handler::on_message`]. No lock, and the state
//!   may hold what is not `Send` (`Rc`, a connection's [`runtime::ConnId`]);
//!   but each request to another loop costs a message there and one
//!   back, each a queue push and, while that loop sleeps, an eventfd
//!   wake. Right for what belongs to one loop anyway: its connections (a
//!   broadcast, as in `examples/chat.rs`, or [`runtime::Sender::broadcast`]),
//!   or work large enough to amortize the trip. An inbox may be bounded
//!   ([`runtime::ConfigBuilder::inbox_capacity`]): [`runtime::Sender::try_send`]
//!   refuses past it, and a producer loop hears when room returns
//!   ([`runtime::Io::when_room`], [`runtime::Handler::on_room`]) instead
//!   of polling.
//!
//! Measured with `cargo run --release -p iomux --example state_sharing`
//! (2-vCPU VM, Linux 6.18, one CPU busy with a fuzzer): 12-13 ns per GET
//! or SET on a locked map from one thread and 14 ns from two; 5.7-5.9 µs
//! and 4 syscalls per round trip of messages between two loops, on epoll
//! and io_uring alike. A RESP command costs the server a few µs of CPU,
//! so routing each to an owning loop would cost more than the command
//! itself: the RESP server shares its keyspace behind a lock.
//!
//! # Example
//!
//! ```no_run
//! use iomux::runtime::{Config, ConnId, Handler, Io, Runtime};
//!
//! struct Echo;
//! impl Handler for Echo {
//!     type Conn = ();
//!     type Message = ();
//!     fn on_accept(&mut self, _: &mut Io<()>, _: ConnId) {}
//!     fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
//!         let _ = io.write(conn, data); // false only once the connection is closing
//!         data.len()
//!     }
//! }
//!
//! let config = Config::builder().backend(iomux::Backend::from_env()?).build()?;
//! Runtime::new(config, 1)?.bind("127.0.0.1:7878".parse().unwrap())?.stop_on_signals().run(|_| Echo)?;
//! # Ok::<(), iomux::Error>(())
//! ```
//!
//! More in `examples/`: `echo.rs`, `kv.rs` (a line protocol with
//! per-connection state and idle timeouts), `chat.rs` (messages between
//! loops), `proxy.rs` (two connections relayed, TCP or Unix upstream) and
//! `state_sharing.rs` (what a lock and a message cost).
#![deny(unsafe_code)]
#![warn(missing_docs)]

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
