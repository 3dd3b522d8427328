//! The readiness driver: any [`Poller`] (select, poll, epoll LT/ET).
//!
//! Reads go into one scratch buffer per loop, so a connection owns no
//! receive buffer. Level-triggered connections are read once per event
//! (the kernel reports them again). Edge-triggered ones are read until
//! EAGAIN or a short read (new data after a short read raises a new edge),
//! at most `read_budget` reads per event; a connection that used its budget
//! goes to the back of a local ready list, so one fire hose cannot starve
//! the others and its edge is never lost.

use super::core::{Core, Driver, Setup};
use super::io::{Accept, Io, CONNECTING, SPLICE_OUT_WAIT};
use super::stats::LoopStats;
use super::{CloseReason, ConnId, Handler};
use crate::error::Result;
use crate::poller::{Event, Events, Interest, Mode, Poller, Token};
use crate::sys::net::{self, AnyAddr, Fd};
use crate::Syscall;
use std::collections::VecDeque;
use std::io;

const LISTENER: Token = Token(usize::MAX);
const WAKER: Token = Token(usize::MAX - 1);
/// Accepts per listener event: until EAGAIN, which empties the listen
/// queue before it can overflow, but at most one full queue's worth, so a
/// storm that outpaces accept cannot hold the loop in one turn for ever.
const ACCEPT_BATCH: usize = 4096;

// The driver's bits in `Conn::driver`.
const WANT_READ: u16 = 1; // registered interest includes READABLE
const WANT_WRITE: u16 = 2; // ... includes WRITABLE: waiting for room to write
const REGISTERED: u16 = 4;
const IN_READY: u16 = 8; // in the local ready list
const PARKED: u16 = 16; // out of the poller: hung up in order while not read

/// Bits of a token that hold the slab index; the rest hold the low bits
/// of the generation (all 32 of them where `usize` has 64 bits, 8 where it
/// has 32, which leaves room for 16 million connections per loop).
const INDEX_BITS: u32 = if usize::BITS >= 64 { 32 } else { 24 };
const GEN_MASK: u64 = (1 << (usize::BITS - INDEX_BITS)) - 1;

fn token(id: ConnId) -> Token {
    Token(((u64::from(id.gen) & GEN_MASK) << INDEX_BITS | u64::from(id.index)) as usize)
}

/// The live connection a token names, if its generation still matches.
fn conn_of<S>(io: &Io<S>, t: Token) -> Option<ConnId> {
    let t = t.0 as u64;
    let id = io.conns.id_at((t & ((1 << INDEX_BITS) - 1)) as u32)?;
    (u64::from(id.gen) & GEN_MASK == t >> INDEX_BITS).then_some(id)
}

struct Readiness {
    poller: Box<dyn Poller>,
    mode: Mode,
    listener: Option<Fd>,
    listening: bool,
    /// Edge-triggered connections that may still have data to read.
    ready: VecDeque<ConnId>,
}

pub fn run<H: Handler>(setup: Setup<'_, H::Message>, handler: &mut H) -> Result<LoopStats> {
    let mut core = Core::new(&setup, handler);
    let Setup { cfg, listener, ready, signal_slot, .. } = setup;
    let mut poller = cfg.backend.open()?;
    core.wake_with(&poller.waker(WAKER)?, signal_slot);
    if let Some(l) = &listener {
        poller.add(l.raw(), LISTENER, Interest::READABLE, Mode::Level)?;
    }
    let listening = listener.is_some();
    let mut k = Readiness { poller, mode: cfg.backend.mode(), listener, listening, ready: VecDeque::new() };
    let mut events = Events::with_capacity(1024);
    let mut scratch = vec![0; cfg.read_buffer];
    ready();
    core.start(&mut k);
    while !core.finished() {
        let timeout = core.timeout(!k.ready.is_empty());
        k.poller.wait(&mut events, timeout)?;
        core.begin_turn();
        for ev in events.iter() {
            match ev.token() {
                LISTENER => k.accept_batch(&mut core),
                WAKER => core.woken(),
                t => {
                    if let Some(id) = conn_of(&core.io, t) {
                        k.conn_event(&mut core, &mut scratch, id, ev);
                    }
                }
            }
            core.settle(&mut k);
        }
        // Edge-triggered connections that used their budget, oldest first;
        // those that use it again go to the back for the next turn.
        for _ in 0..k.ready.len() {
            let Some(id) = k.ready.pop_front() else { break };
            if let Some(c) = core.io.conn_mut(id) {
                c.driver &= !IN_READY;
                k.read(&mut core, &mut scratch, id, false);
                core.settle(&mut k);
            }
        }
        core.end_turn(&mut k);
    }
    drop(k);
    Ok(core.finish(None))
}

impl Readiness {
    fn conn_event<H: Handler>(&mut self, core: &mut Core<H>, scratch: &mut [u8], id: ConnId, ev: Event) {
        let Some(c) = core.io.conn(id) else { return };
        if c.has(CONNECTING) {
            return self.finish_connect(core, id);
        }
        let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
        // Read from the connection at hand: no second lookup per event.
        let pipe_waits = writable && c.has(SPLICE_OUT_WAIT);
        if c.has_unsent() && writable {
            self.flush(&mut core.io, id);
            core.io.mark_dirty(id);
        }
        if pipe_waits {
            core.io.splice_room(id); // a pipe into it waited for room
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            // A short read proves the socket drained only if no FIN had
            // arrived (a FIN already queued raises no new edge) and no
            // urgent data is pending (a read stops short at its mark).
            let short_read_drains = !ev.is_read_closed() && !ev.is_priority();
            self.read(core, scratch, id, short_read_drains);
        }
        // An error or hang-up on a connection neither read nor written
        // (half-closed and waiting, or paused): nothing above looked at
        // it, and level-triggered epoll and poll would report it forever.
        // The event's bits first: no connection lookup on an ordinary event.
        let gone = ev.is_error() || ev.bits() & libc::EPOLLHUP as u32 != 0;
        if gone
            && core.io.conn(id).is_some_and(|c| !c.reading() && !c.splice_wants_input() && !c.has_unsent())
            && !core.io.peer_gone(id, Syscall::Recvfrom)
        {
            self.park(&mut core.io, id);
        }
    }

    /// Reads once (level) or until EAGAIN (edge, within the budget). With
    /// `short_read_drains`, an edge-triggered read that returns less than
    /// the buffer also ends it: new data after it raises a new edge.
    fn read<H: Handler>(&mut self, core: &mut Core<H>, scratch: &mut [u8], id: ConnId, short_read_drains: bool) {
        let edge = self.mode == Mode::Edge;
        let budget = if edge { core.io.cfg.read_budget } else { 1 };
        for used in 0..budget {
            let Some(c) = core.io.conn(id) else { return };
            if c.splicing() {
                // Spliced from here on (maybe since the last call): the rest
                // of the budget goes to the splice.
                let more = core.io.pump(id, budget - used);
                if core.io.conn(id).is_some_and(|c| !c.splicing() && c.reading()) {
                    continue; // the splice ended at an urgent mark: recv reads on
                }
                if more && edge {
                    break; // budget used: come back after the others
                }
                return;
            }
            if !c.reading() {
                return;
            }
            match net::recv(c.fd.raw(), scratch) {
                Ok(0) => return core.io.peer_eof(id),
                Ok(n) => {
                    core.received(id, &scratch[..n]);
                    core.settle(self);
                    if !edge || (short_read_drains && n < scratch.len()) {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return core.io.failed(id, Syscall::Recvfrom, e),
            }
        }
        // Budget used and maybe still readable: come back after the others.
        if let Some(c) = core.io.conn_mut(id) {
            if (c.reading() || c.splice_wants_input()) && c.driver & IN_READY == 0 {
                c.driver |= IN_READY;
                self.ready.push_back(id);
            }
        }
    }

    /// Sends unsent output until done or EAGAIN: one `send` when it is in
    /// one piece, else one `sendmsg` of its pieces.
    fn flush<S>(&mut self, io: &mut Io<S>, id: ConnId) {
        loop {
            let Some(c) = io.conn(id) else { return };
            if !c.has_unsent() {
                return;
            }
            let (gathered, done) = match c.unsent_flat() {
                Some(flat) => (false, net::send(c.fd.raw(), flat)),
                None => (true, net::sendmsg(c.fd.raw(), &c.unsent_slices())),
            };
            match done {
                Ok(n) => {
                    io.stats.gathered_sends += u64::from(gathered);
                    io.sent(id, n)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A send is `sendto` in close reasons, gathered or not, as
                // on io_uring: one name per operation on every backend.
                Err(e) => return io.failed(id, Syscall::Sendto, e),
            }
        }
    }

    fn finish_connect<H: Handler>(&mut self, core: &mut Core<H>, id: ConnId) {
        let Some(c) = core.io.conn(id) else { return };
        match net::take_socket_error(c.fd.raw()) {
            Ok(None) => {
                // Connected: what was written meanwhile goes out at once.
                if let Some(c) = core.io.conn_mut(id) {
                    c.driver &= !WANT_WRITE;
                }
                core.connected(id)
            }
            Ok(Some(e)) | Err(e) => core.io.connect_failed(id, e),
        }
    }

    fn accept_batch<H: Handler>(&mut self, core: &mut Core<H>) {
        let Some(lfd) = self.listener.as_ref().map(Fd::raw) else { return };
        for _ in 0..ACCEPT_BATCH {
            if matches!(core.io.accept_budget(), Accept::Closed | Accept::Up(0)) {
                return;
            }
            match net::accept(lfd) {
                Ok(fd) => core.accepted(self, fd),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => core.io.accept_failed(&e),
            }
        }
    }

    /// Takes a connection out of the poller until it reads again: its
    /// peer hung up in order while it was not read, and the hang-up would
    /// be reported on every wait meanwhile.
    fn park<S>(&mut self, io: &mut Io<S>, id: ConnId) {
        let Some(c) = io.conn_mut(id) else { return };
        if c.driver & REGISTERED != 0 && self.poller.delete(c.fd.raw()).is_ok() {
            c.driver = (c.driver & !(REGISTERED | WANT_READ | WANT_WRITE)) | PARKED;
        }
    }

    fn set_listening(&mut self, on: bool) {
        let Some(l) = &self.listener else { return };
        if on == self.listening {
            return;
        }
        // On failure nothing changes, and the next settle tries again.
        let done = if on {
            self.poller.add(l.raw(), LISTENER, Interest::READABLE, Mode::Level)
        } else {
            self.poller.delete(l.raw())
        };
        if done.is_ok() {
            self.listening = on;
        }
    }
}

impl Driver for Readiness {
    fn sync<S>(&mut self, io: &mut Io<S>, id: ConnId) {
        let Some(c) = io.conn(id) else { return };
        if !c.has(CONNECTING) && c.has_unsent() && c.driver & WANT_WRITE == 0 {
            // Not waiting for room: try now (most writes complete at once).
            self.flush(io, id);
        }
        let Some(c) = io.conn_mut(id) else { return };
        let reads = c.reading() || c.splice_wants_input();
        if c.driver & PARKED != 0 && (reads || c.has_unsent()) {
            // Back in the poller, level-triggered reads find the input and
            // the end that waited (edge-triggered: the ready list does).
            match self.poller.add(c.fd.raw(), token(id), Interest::NONE, self.mode) {
                Ok(()) => c.driver = (c.driver & !PARKED) | REGISTERED,
                Err(e) => return io.doom(id, CloseReason::Unwatchable(e)),
            }
        }
        let mut want = 0;
        if reads {
            want |= WANT_READ;
        }
        if c.has_unsent() || c.has(CONNECTING) || c.has(SPLICE_OUT_WAIT) {
            want |= WANT_WRITE;
        }
        let registered = c.driver & (WANT_READ | WANT_WRITE);
        if want == registered || c.driver & REGISTERED == 0 {
            return;
        }
        let interest = match want {
            0 => Interest::NONE,
            WANT_READ => Interest::READABLE,
            WANT_WRITE => Interest::WRITABLE,
            _ => Interest::BOTH,
        };
        match self.poller.modify(c.fd.raw(), token(id), interest, self.mode) {
            Ok(()) => c.driver = (c.driver & !(WANT_READ | WANT_WRITE)) | want,
            Err(e) => return io.doom(id, CloseReason::Unwatchable(e)),
        }
        let resumed = want & WANT_READ != 0 && registered & WANT_READ == 0;
        if self.mode == Mode::Edge && resumed && c.driver & IN_READY == 0 {
            // The edge may have passed while not reading: look again.
            c.driver |= IN_READY;
            self.ready.push_back(id);
        }
    }

    fn adopt<S>(&mut self, io: &mut Io<S>, id: ConnId) -> Result<()> {
        let Some(c) = io.conn_mut(id) else { return Ok(()) };
        self.poller.add(c.fd.raw(), token(id), Interest::READABLE, self.mode)?;
        c.driver = REGISTERED | WANT_READ;
        Ok(())
    }

    fn connect<S>(&mut self, io: &mut Io<S>, id: ConnId, addr: &AnyAddr) {
        let Some(c) = io.conn_mut(id) else { return };
        // Connected at once or in progress: writability says when it is done.
        let started = net::connect(c.fd.raw(), addr)
            .and_then(|_| Ok(self.poller.add(c.fd.raw(), token(id), Interest::WRITABLE, self.mode)?));
        match started {
            Ok(()) => c.driver = REGISTERED | WANT_WRITE,
            Err(e) => io.connect_failed(id, e),
        }
    }

    fn accept<S>(&mut self, _io: &mut Io<S>, accept: Accept) {
        match accept {
            Accept::Closed => {
                self.set_listening(false);
                self.listener = None;
            }
            Accept::Up(0) => self.set_listening(false),
            Accept::Up(_) | Accept::Unlimited => self.set_listening(true),
        }
    }

    fn release(&mut self, _id: ConnId, fd: Fd, driver_bits: u16) {
        if driver_bits & REGISTERED != 0 {
            // Delete before close: never leave a closed fd registered.
            let _ = self.poller.delete(fd.raw());
        }
        drop(fd);
    }
}
