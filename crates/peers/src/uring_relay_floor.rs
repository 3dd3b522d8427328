//! The floor under an io_uring TCP proxy: c/relay_floor.c's relay, on
//! io_uring. One thread, one ring (SINGLE_ISSUER | DEFER_TASKRUN, as
//! iomux's uring backend asks for first); a multishot accept; each client
//! gets its own upstream connection (a blocking connect: over loopback it
//! completes at once); each side has one receive in flight into its own
//! buffer, and each receive is followed by one send of what it read to the
//! partner, then the next receive. One `io_uring_enter` per turn submits
//! and waits. Nothing else: no half-close (an end of input, an error or a
//! short send closes both), no backpressure beyond one buffer per side.
//!
//! Valid, like the C floor, only where sends complete whole, as for wrk's
//! GETs through it to nginx over loopback. What a proxy spends beyond it
//! is its own.

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};

const ENTRIES: u32 = 1024;
/// Each side's receive buffer (haproxy's tune.bufsize).
const BUF: usize = 16 << 10;

// user_data: the kind in the top byte, the slot's generation, its index.
const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const IGNORE: u64 = 4;

fn ud(kind: u64, gen: u32, index: usize) -> u64 {
    kind << 56 | u64::from(gen & 0xff_ffff) << 32 | index as u64
}

/// One side of a relayed pair. It has exactly one request in flight
/// while it lives: its receive, or the send of what that received (from
/// its buffer, to its partner).
struct Side {
    fd: OwnedFd,
    partner: usize,
    buf: Box<[u8]>,
    /// What the send in flight must send.
    expect: i32,
    /// Closed: its request in flight is cancelled, and the side (its
    /// descriptor and buffer) goes when that request ends.
    closing: bool,
}

impl Side {
    fn new(fd: OwnedFd, partner: usize) -> Side {
        Side { fd, partner, buf: vec![0; BUF].into_boxed_slice(), expect: 0, closing: false }
    }
}

/// Sides by slot; a slot's generation names its current occupant, so a
/// late completion never reaches a newer connection in the same slot.
#[derive(Default)]
struct Slots {
    sides: Vec<Option<Side>>,
    gens: Vec<u32>,
    free: Vec<usize>,
}

impl Slots {
    fn insert(&mut self, side: Side) -> usize {
        let i = self.free.pop().unwrap_or_else(|| {
            self.sides.push(None);
            self.gens.push(0);
            self.sides.len() - 1
        });
        self.sides[i] = Some(side);
        i
    }
    fn live(&self, user_data: u64) -> Option<usize> {
        let i = (user_data & 0xffff_ffff) as usize;
        let gen = ((user_data >> 32) & 0xff_ffff) as u32;
        (self.sides.get(i)?.is_some() && self.gens[i] & 0xff_ffff == gen).then_some(i)
    }
    fn remove(&mut self, i: usize) -> Option<Side> {
        let side = self.sides.get_mut(i)?.take()?;
        self.gens[i] = self.gens[i].wrapping_add(1);
        self.free.push(i);
        Some(side)
    }
}

struct Floor {
    ring: IoUring,
    slots: Slots,
    listen_fd: RawFd,
    upstream: SocketAddrV4,
}

fn context(what: &'static str) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The floor on `listener` (bound and listening), each connection relayed
/// to its own connection to `upstream`, as [`crate::Peer::serve_ready`].
pub fn serve(listener: TcpListener, upstream: SocketAddrV4, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(ENTRIES)
        .map_err(context("io_uring_setup (SINGLE_ISSUER | DEFER_TASKRUN)"))?;
    let mut floor = Floor { ring, slots: Slots::default(), listen_fd: listener.as_raw_fd(), upstream };
    floor.push(opcode::AcceptMulti::new(types::Fd(floor.listen_fd)).build().user_data(ACCEPT << 56))?;
    ready()?;
    loop {
        match floor.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
            Err(e) => return Err(context("io_uring_enter")(e)),
        }
        let done: Vec<cqueue::Entry> = floor.ring.completion().collect();
        for c in done {
            floor.complete(&c)?;
        }
    }
}

impl Floor {
    fn push(&mut self, sqe: squeue::Entry) -> io::Result<()> {
        // SAFETY: every buffer an entry points at is a side's own, boxed
        // (its address does not move), and a side is dropped only once it
        // has no request in flight (see `Side` and `close_pair`).
        while unsafe { self.ring.submission().push(&sqe) }.is_err() {
            self.ring.submit().map_err(context("io_uring_enter (a full submission queue)"))?;
        }
        Ok(())
    }

    fn complete(&mut self, c: &cqueue::Entry) -> io::Result<()> {
        let user_data = c.user_data();
        match user_data >> 56 {
            ACCEPT => {
                if !cqueue::more(c.flags()) {
                    let accept = opcode::AcceptMulti::new(types::Fd(self.listen_fd)).build().user_data(ACCEPT << 56);
                    self.push(accept)?;
                }
                if c.result() >= 0 {
                    // SAFETY: a successful accept's result is a new descriptor nobody owns.
                    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(c.result()) };
                    self.pair(fd)?;
                }
            }
            RECV | SEND => {
                let Some(i) = self.slots.live(user_data) else { return Ok(()) };
                let Some(side) = self.slots.sides[i].as_mut() else { return Ok(()) };
                if side.closing {
                    self.slots.remove(i); // its last request ended
                    return Ok(());
                }
                let (recv, result) = (user_data >> 56 == RECV, c.result());
                if (recv && result <= 0) || (!recv && result != side.expect) {
                    return self.close_pair(i); // an end, an error or a short send
                }
                if !recv {
                    return self.recv(i);
                }
                side.expect = result;
                let (partner, buf) = (side.partner, side.buf.as_ptr());
                let to = match self.slots.sides[partner].as_ref() {
                    Some(p) if !p.closing => p.fd.as_raw_fd(),
                    _ => return self.close_pair(i),
                };
                let send = opcode::Send::new(types::Fd(to), buf, result as u32);
                self.push(send.build().user_data(ud(SEND, self.slots.gens[i], i)))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A new client: its upstream connection, then a receive on each.
    fn pair(&mut self, client: OwnedFd) -> io::Result<()> {
        let Ok(up) = TcpStream::connect(self.upstream) else { return Ok(()) }; // the client sees its end
        let _ = up.set_nodelay(true);
        // SAFETY: into_raw_fd gives up ownership of a descriptor now owned here alone.
        let up: OwnedFd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(up.into_raw_fd()) };
        let c = self.slots.insert(Side::new(client, usize::MAX));
        let u = self.slots.insert(Side::new(up, c));
        if let Some(side) = self.slots.sides[c].as_mut() {
            side.partner = u;
        }
        self.recv(c)?;
        self.recv(u)
    }

    fn recv(&mut self, i: usize) -> io::Result<()> {
        let Some(side) = self.slots.sides[i].as_mut() else { return Ok(()) };
        let recv = opcode::Recv::new(types::Fd(side.fd.as_raw_fd()), side.buf.as_mut_ptr(), BUF as u32)
            .build()
            .user_data(ud(RECV, self.slots.gens[i], i));
        self.push(recv)
    }

    /// Closes side `i`, which has no request in flight (its last one just
    /// ended), and its partner, whose request in flight is cancelled: the
    /// partner goes when that ends, so no buffer is freed under the kernel.
    fn close_pair(&mut self, i: usize) -> io::Result<()> {
        let partner = self.slots.remove(i).map(|s| s.partner);
        let Some(j) = partner else { return Ok(()) };
        let gen = self.slots.gens[j];
        match self.slots.sides.get_mut(j).and_then(Option::as_mut) {
            Some(p) if !p.closing => p.closing = true,
            _ => return Ok(()),
        }
        for kind in [RECV, SEND] {
            self.push(opcode::AsyncCancel::new(ud(kind, gen, j)).build().user_data(IGNORE << 56))?;
        }
        Ok(())
    }
}
