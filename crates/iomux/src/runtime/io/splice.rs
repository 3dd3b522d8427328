//! Relaying one connection's input to another inside the kernel:
//! splice(2) from the socket into a pipe, and from the pipe into the other
//! socket, so the bytes never reach user space. A proxy's bulk transfers
//! need nothing else from the handler.
//!
//! Every backend pumps with the same two syscalls and only waits
//! differently: a readiness backend by its poller, io_uring by a one-shot
//! IORING_OP_POLL_ADD. io_uring's own IORING_OP_SPLICE is not used: the
//! kernel never runs it inline (`io_splice` refuses a non-blocking issue,
//! so every one goes to an io-wq worker thread), and from a non-blocking
//! socket the worker completes it with EAGAIN instead of waiting, so it
//! would need the same poll first and then cost a thread hand-off per
//! chunk.

use super::{Io, CLOSING, CONNECTING, DOOMED, HELD, LAYERED, PAUSED, READ_CLOSED, UNOFFERED, WRITE_SHUT};
use crate::sys::{self, net, net::Fd};
use crate::Syscall;
use std::io;
use std::os::fd::RawFd;

/// What one splice from the socket into the pipe asks for: a default
/// pipe's capacity (16 pages).
const PIPE_CHUNK: usize = 64 << 10;

/// The core's flag on a connection whose pipe-fed output waits for room
/// in its socket (the driver waits for writability, then calls
/// [`Io::splice_room`]).
pub(crate) const SPLICE_OUT_WAIT: u32 = 32768;

/// A splice from one connection (which owns this) into another.
pub(crate) struct Splice {
    pub(crate) to: ConnId,
    pipe_read: Fd,
    pipe_write: Fd,
    /// Bytes in the pipe, not yet in `to`'s socket.
    held: usize,
    /// Bytes moved from the socket into the pipe so far.
    moved: u64,
    /// The driver may splice from the socket: nothing it read before can
    /// still arrive (io_uring: no receive left in flight).
    pub(crate) may_read: bool,
}

use super::super::ConnId;

impl<S> super::Conn<S> {
    /// Whether the driver should wait for input to splice: splicing, the
    /// pipe empty, and reading neither paused nor over.
    pub(crate) fn splice_wants_input(&self) -> bool {
        self.splice.as_ref().is_some_and(|s| s.held == 0 && s.may_read)
            && self.pending_in.is_empty()
            && self.flags & (READ_CLOSED | CONNECTING | DOOMED | CLOSING | PAUSED | HELD | UNOFFERED) == 0
    }

    /// Whether this connection splices its input into another.
    pub(crate) fn splicing(&self) -> bool {
        self.splice.is_some()
    }

    /// The driver has nothing read from this socket in flight any more:
    /// splicing from it may start.
    pub(crate) fn allow_splice_reads(&mut self) {
        if let Some(sp) = self.splice.as_deref_mut() {
            sp.may_read = true;
        }
    }
}

/// Whether a splice that returned EAGAIN or 0 stopped at a TCP urgent
/// mark. Not "bytes still unread": bytes may arrive between the splice
/// and the check, and ending the splice then would hand the rest of the
/// stream back to `on_data` for nothing.
fn at_urgent_mark(fd: RawFd) -> bool {
    net::at_urgent_mark(fd).unwrap_or(false)
}

impl<S> Io<S> {
    /// Relays `from`'s input to `to` inside the kernel (splice(2) through
    /// a pipe) instead of offering it to
    /// [`Handler::on_data`](super::super::Handler::on_data): the bytes are
    /// never copied to user space. For a proxy's bulk data; on loopback it
    /// saves little, since the kernel still copies each byte once.
    ///
    /// - It starts with the bytes the loop has not read yet: input already
    ///   read (the rest of this read; on io_uring, what its receive held)
    ///   is offered to `on_data` first, as ever, and what the handler
    ///   declines of it is queued on `to`. `to`'s queued output always
    ///   goes out before spliced bytes.
    /// - At most one pipe (64 KiB) is in flight: `from` is not read while
    ///   the pipe cannot empty into `to`, so TCP holds the sender back.
    ///   [`Io::pause_reading`] on `from` stops it as it stops reading.
    /// - `from`'s end of input is told
    ///   ([`Handler::on_read_closed`](super::super::Handler::on_read_closed))
    ///   once every byte before it is in `to`'s socket, and the splice ends.
    /// - It ends too when either side closes or `to`'s write side is shut
    ///   down: what the pipe holds then is queued on `to`, so nothing read
    ///   is lost, and `from` is read and offered as before.
    /// - Errors close the side they happened on, as a receive's or a
    ///   send's would (the syscall is `splice`).
    ///
    /// Returns false, and nothing changes, if either is gone, closing or
    /// layered ([`Io::set_layer`]: its bytes must pass through the layer),
    /// they are the same connection, `from` already splices, something
    /// already splices into `to`, or no pipe could be made (the handler
    /// then goes on copying).
    ///
    /// ```
    /// use iomux::runtime::{ConnId, Handler, Io};
    ///
    /// /// A relay (the other side opened by `connect`, not shown) that
    /// /// splices a direction once it carries a full read at a time.
    /// struct Relay;
    ///
    /// impl Handler for Relay {
    ///     type Conn = ConnId; // the partner
    ///     type Message = ();
    ///     fn on_accept(&mut self, _io: &mut Io<ConnId>, conn: ConnId) -> ConnId {
    ///         conn // stands in for the upstream here
    ///     }
    ///     fn on_data(&mut self, io: &mut Io<ConnId>, conn: ConnId, to: &mut ConnId, data: &[u8]) -> usize {
    ///         if !io.write(*to, data) {
    ///             io.close(conn);
    ///         } else if data.len() >= 16 << 10 {
    ///             let _ = io.splice(conn, *to); // bulk: from now on in the kernel
    ///         }
    ///         data.len()
    ///     }
    /// }
    /// ```
    #[must_use = "false: not splicing, the input still comes to on_data"]
    pub fn splice(&mut self, from: ConnId, to: ConnId) -> bool {
        // A layered connection's bytes must pass through its layer.
        let open = |c: &super::Conn<S>| c.flags & (CLOSING | DOOMED | LAYERED) == 0;
        let (Some(f), Some(t)) = (self.conns.get(from), self.conns.get(to)) else { return false };
        if from == to
            || f.splicing()
            || f.has(READ_CLOSED)
            || self.feeders.contains_key(&to)
            || !open(f)
            || !open(t)
            || t.has(WRITE_SHUT)
        {
            return false;
        }
        // io_uring's sockets block, and so would the socket's side of a
        // splice (SPLICE_F_NONBLOCK covers only the pipe's), holding the
        // whole loop: the splice's sockets are made non-blocking.
        let uring = self.cfg.backend.is_uring();
        if uring && (net::set_nonblocking(f.fd.raw()).is_err() || net::set_nonblocking(t.fd.raw()).is_err()) {
            return false;
        }
        let Ok((pipe_read, pipe_write)) = net::pipe() else { return false };
        // A readiness backend reads only when asked: nothing is in flight.
        let may_read = !uring;
        let splice = Splice { to, pipe_read, pipe_write, held: 0, moved: 0, may_read };
        if let Some(f) = self.conns.get_mut(from) {
            f.splice = Some(Box::new(splice));
        }
        self.feeders.insert(to, from);
        self.pumps.push_back(from);
        self.mark_dirty(from);
        true
    }

    /// Whether `conn` splices its input into another connection.
    pub(crate) fn splicing(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(|c| c.splice.is_some())
    }

    /// Bytes spliced from `conn`'s socket so far, while it splices (0
    /// otherwise): what a relay's idle timeout looks at, as no
    /// `on_data` comes.
    pub fn spliced(&self, conn: ConnId) -> u64 {
        self.conns.get(conn).and_then(|c| c.splice.as_ref()).map_or(0, |s| s.moved)
    }

    /// Moves what it can: the pipe into `to` (when `to` has nothing queued
    /// before it), then `from`'s socket into the pipe, at most `budget`
    /// times; returns true if the budget ran out with input maybe left.
    pub(crate) fn pump(&mut self, from: ConnId, budget: usize) -> bool {
        self.forward_pending(from);
        let mut budget = budget;
        loop {
            let Some(c) = self.conns.get(from) else { return false };
            let Some(sp) = c.splice.as_deref() else { return false };
            let (to, held, may_read) = (sp.to, sp.held, sp.may_read);
            let (fd, pipe_read, pipe_write) = (c.fd.raw(), sp.pipe_read.raw(), sp.pipe_write.raw());
            let reading =
                c.flags & (CLOSING | DOOMED | PAUSED | HELD | UNOFFERED | CONNECTING) == 0 && c.pending_in.is_empty();
            let read_closed = c.has(READ_CLOSED);
            if held > 0 && !self.drain_pipe(from, to, pipe_read, held) {
                return false; // waits for `to`
            }
            if read_closed {
                // The end came another way (a receive in flight saw it).
                self.end_splice(from);
                return false;
            }
            if !reading || !may_read {
                return false;
            }
            if budget == 0 {
                return true;
            }
            budget -= 1;
            let done = net::splice(fd, pipe_write, PIPE_CHUNK);
            // EAGAIN or 0, not another error: a reset at a mark is a failure.
            let stalled = matches!(done, Ok(0)) || done.as_ref().is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock);
            match done {
                _ if stalled && at_urgent_mark(fd) => {
                    // TCP's splice stops at an urgent mark (EAGAIN, or 0
                    // after a FIN) though SO_OOBINLINE keeps the byte in
                    // the stream: the connection is read as before from
                    // here, by recv, which reads past it.
                    self.end_splice(from);
                    return false;
                }
                Ok(0) => {
                    self.end_splice(from);
                    self.peer_eof(from);
                    return false;
                }
                Ok(n) => {
                    self.stats.bytes_in += n as u64;
                    self.stats.reads += 1;
                    self.stats.spliced += n as u64;
                    if let Some(sp) = self.conns.get_mut(from).and_then(|c| c.splice.as_deref_mut()) {
                        sp.held += n;
                        sp.moved += n as u64;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.mark_dirty(from);
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed(from, Syscall::Splice, e);
                    return false;
                }
            }
        }
    }

    /// Empties the pipe into `to`; true once it is empty. Waits (false)
    /// while `to` is connecting or has output queued, which goes first,
    /// or its socket is full.
    fn drain_pipe(&mut self, from: ConnId, to: ConnId, pipe_read: RawFd, mut held: usize) -> bool {
        let Some(t) = self.conns.get(to) else {
            self.end_splice(from);
            return false;
        };
        if t.buffered() > 0 || t.has(CONNECTING) {
            // on_empty or connected pumps again; meanwhile `from` is not
            // read (its interest changes now: the pipe holds bytes).
            self.mark_dirty(from);
            return false;
        }
        let to_fd = t.fd.raw();
        while held > 0 {
            match net::splice(pipe_read, to_fd, held) {
                // An empty pipe: `held` can only be wrong, never loop on it.
                Ok(0) => held = 0,
                Ok(n) => {
                    held -= n.min(held);
                    self.stats.bytes_out += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.set_held(from, held);
                    if let Some(t) = self.conns.get_mut(to) {
                        t.flags |= SPLICE_OUT_WAIT;
                    }
                    self.mark_dirty(to);
                    self.mark_dirty(from);
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed(to, Syscall::Splice, e);
                    return false;
                }
            }
        }
        self.set_held(from, 0);
        self.mark_dirty(from); // the pipe is empty: read again
        true
    }

    fn set_held(&mut self, from: ConnId, held: usize) {
        if let Some(sp) = self.conns.get_mut(from).and_then(|c| c.splice.as_deref_mut()) {
            sp.held = held;
        }
    }

    /// Input read before the splice began that the handler declined (not
    /// input held back unoffered, which it is offered first): it goes to
    /// `to` before anything spliced, as output.
    fn forward_pending(&mut self, from: ConnId) {
        let Some(c) = self.conns.get_mut(from) else { return };
        let Some(to) = c.splice.as_ref().map(|s| s.to) else { return };
        if c.pending_in.is_empty() || c.has(UNOFFERED) {
            return;
        }
        let pending = std::mem::take(&mut c.pending_in);
        let _ = self.write(to, &pending); // refused only once `to` is closing
        self.recycle(pending);
        self.mark_dirty(from);
    }

    /// `to`'s socket has room again (the driver saw it writable).
    pub(crate) fn splice_room(&mut self, to: ConnId) {
        let Some(t) = self.conns.get_mut(to) else { return };
        if t.has(SPLICE_OUT_WAIT) {
            t.flags &= !SPLICE_OUT_WAIT;
            self.mark_dirty(to);
            self.wake_feeder(to);
        }
    }

    /// `to` can take spliced bytes now (its output emptied, or it
    /// connected): its feeder pumps on this turn.
    pub(crate) fn wake_feeder(&mut self, to: ConnId) {
        if let Some(&from) = self.feeders.get(&to) {
            self.pumps.push_back(from);
        }
    }

    /// Stops `from`'s splice: what the pipe holds is queued on its target
    /// (copied out of the pipe), and `from` is read as before.
    pub(crate) fn end_splice(&mut self, from: ConnId) {
        self.forward_pending(from);
        let Some(sp) = self.conns.get_mut(from).and_then(|c| c.splice.take()) else { return };
        self.feeders.remove(&sp.to);
        if let Some(t) = self.conns.get_mut(sp.to) {
            t.flags &= !SPLICE_OUT_WAIT;
        }
        self.rescue_pipe(&sp);
        self.mark_dirty(from);
        self.mark_dirty(sp.to);
    }

    /// Connection `id` is being closed for good: its splice ends (what
    /// its pipe holds is queued on the target) and whoever splices into it
    /// stops.
    pub(crate) fn splice_released(&mut self, id: ConnId) {
        self.end_splice(id);
        self.unfeed(id);
    }

    /// `to` is going: whoever splices into it stops, and is read as
    /// before (the pipe's bytes were `to`'s, and go with it).
    fn unfeed(&mut self, to: ConnId) {
        let Some(from) = self.feeders.remove(&to) else { return };
        if let Some(c) = self.conns.get_mut(from) {
            c.splice = None;
        }
        self.mark_dirty(from);
    }

    /// Queues the pipe's bytes on the splice's target, copied out.
    fn rescue_pipe(&mut self, sp: &Splice) {
        let mut left = sp.held;
        let mut buf = vec![0; left.min(PIPE_CHUNK)];
        while left > 0 {
            match sys::read(sp.pipe_read.raw(), &mut buf) {
                Ok(0) | Err(_) => break, // a pipe we own does not fail
                Ok(n) => {
                    left -= n;
                    let _ = self.write(sp.to, &buf[..n]); // refused only if `to` is closing
                }
            }
        }
    }
}
