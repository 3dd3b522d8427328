//! The readiness layer: one [`Poller`] trait, one file per mechanism.
//!
//! The contract, on every mechanism:
//! - `wait` may report spurious events; a handler must tolerate an event
//!   for which `read`/`write` then says EAGAIN.
//! - [`Mode::Level`] reports a ready fd on every `wait` while it stays ready.
//! - [`Mode::Edge`] reports a fd when it becomes ready (each new arrival),
//!   not again while the data sits unread: the caller must drain it to
//!   EAGAIN, or remember it is still ready.
//! - [`Mode::Oneshot`] reports once, then nothing until `modify` re-arms it.
//! - A mechanism that cannot do a mode says so with [`Error::Unsupported`]
//!   at `add`/`modify`; nothing falls back silently.
//! - Delete a fd before closing it. (epoll forgets closed fds by itself
//!   only when no duplicate of them is open; io_uring keeps the file alive
//!   while a poll on it is armed.)

mod epoll;
mod poll;
mod select;
mod uring;

pub use epoll::EpollPoller;
pub use poll::PollPoller;
pub use select::{SelectPoller, FD_SETSIZE};
pub(crate) use uring::uring_unavailable;
pub use uring::UringPoller;

use crate::error::{Error, Result};
use crate::sys;
use crate::Syscall;
use rustix::event::epoll::{Event as EpollEvent, EventData, EventFlags};
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The caller's name for a registered fd, handed back in its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub usize);

/// Which readiness a registration asks for.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interest(u8);

impl Interest {
    /// Only errors and hang-ups (which epoll and poll always report).
    pub const NONE: Interest = Interest(0);
    /// Data to read, EOF, or an error.
    pub const READABLE: Interest = Interest(1);
    /// Room to write.
    pub const WRITABLE: Interest = Interest(2);
    /// Both.
    pub const BOTH: Interest = Interest(3);

    /// Whether READABLE is part of it.
    pub const fn is_readable(self) -> bool {
        self.0 & 1 != 0
    }
    /// Whether WRITABLE is part of it.
    pub const fn is_writable(self) -> bool {
        self.0 & 2 != 0
    }

    /// epoll bits; readable interest includes EPOLLRDHUP so that a peer's
    /// shutdown is reported as such, not only as a readable fd, and
    /// EPOLLPRI so that pending urgent data (at whose mark a read stops
    /// short) is reported too.
    pub(crate) fn epoll_bits(self) -> u32 {
        let mut bits = 0;
        if self.is_readable() {
            bits |= (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLPRI) as u32;
        }
        if self.is_writable() {
            bits |= libc::EPOLLOUT as u32;
        }
        bits
    }

    /// poll(2) bits, the same as epoll's for these events.
    pub(crate) fn poll_bits(self) -> i16 {
        let mut bits = 0;
        if self.is_readable() {
            bits |= libc::POLLIN | libc::POLLRDHUP | libc::POLLPRI;
        }
        if self.is_writable() {
            bits |= libc::POLLOUT;
        }
        bits
    }
}

impl std::ops::BitOr for Interest {
    type Output = Interest;
    fn bitor(self, rhs: Interest) -> Interest {
        Interest(self.0 | rhs.0)
    }
}

impl fmt::Debug for Interest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.is_readable(), self.is_writable()) {
            (true, true) => f.write_str("READABLE | WRITABLE"),
            (true, false) => f.write_str("READABLE"),
            (false, true) => f.write_str("WRITABLE"),
            (false, false) => f.write_str("(none)"),
        }
    }
}

/// How readiness is reported; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Reported on every wait while ready.
    Level,
    /// Reported when it becomes ready (each new arrival).
    Edge,
    /// Reported once, then not until re-armed with `modify`.
    Oneshot,
}

/// One readiness event. Bits use epoll's values on every mechanism.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Event {
    token: Token,
    bits: u32,
}

const IN: u32 = libc::EPOLLIN as u32;
const PRI: u32 = libc::EPOLLPRI as u32;
const OUT: u32 = libc::EPOLLOUT as u32;
const ERR: u32 = libc::EPOLLERR as u32;
const HUP: u32 = libc::EPOLLHUP as u32;
const RDHUP: u32 = libc::EPOLLRDHUP as u32;

impl Event {
    /// The token the fd was registered with.
    pub fn token(&self) -> Token {
        self.token
    }
    /// Data (or EOF, or an error) can be read without blocking.
    pub fn is_readable(&self) -> bool {
        self.bits & (IN | PRI) != 0
    }
    /// There is room to write without blocking.
    pub fn is_writable(&self) -> bool {
        self.bits & OUT != 0
    }
    /// TCP urgent data is pending: a read stops short at its mark, so a
    /// short read does not mean the socket is drained.
    pub fn is_priority(&self) -> bool {
        self.bits & PRI != 0
    }
    /// The peer will send no more (it shut down or closed), or both
    /// directions are closed (hang-up).
    pub fn is_read_closed(&self) -> bool {
        self.bits & HUP != 0 || (self.bits & IN != 0 && self.bits & RDHUP != 0)
    }
    /// Nothing more can be written: hang-up, or an error on a writable fd.
    pub fn is_write_closed(&self) -> bool {
        self.bits & HUP != 0 || (self.bits & OUT != 0 && self.bits & ERR != 0)
    }
    /// The fd has a pending error (or, on poll, is not open: POLLNVAL).
    pub fn is_error(&self) -> bool {
        self.bits & ERR != 0
    }
    /// The raw bits, in epoll's encoding.
    pub fn bits(&self) -> u32 {
        self.bits
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("token", &self.token)
            .field("readable", &self.is_readable())
            .field("writable", &self.is_writable())
            .field("read_closed", &self.is_read_closed())
            .field("write_closed", &self.is_write_closed())
            .field("error", &self.is_error())
            .finish()
    }
}

/// The buffer `wait` fills. On epoll it is the kernel's own array: the
/// kernel writes the events straight into it, with no copy.
pub struct Events {
    list: Vec<EpollEvent>,
}

impl Events {
    /// Room for `capacity` events per wait (at least one).
    pub fn with_capacity(capacity: usize) -> Events {
        Events { list: Vec::with_capacity(capacity.max(1)) }
    }
    /// The most events one wait reports.
    pub fn capacity(&self) -> usize {
        self.list.capacity()
    }
    /// Events from the last wait.
    pub fn len(&self) -> usize {
        self.list.len()
    }
    /// Whether the last wait reported nothing.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    /// Forgets the events.
    pub fn clear(&mut self) {
        self.list.clear();
    }
    /// The events of the last wait.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Event> + '_ {
        self.list.iter().map(|&ev| {
            // Copies out of the (packed on x86_64) kernel layout.
            let (flags, data) = (ev.flags, ev.data);
            Event { token: Token(data.u64() as usize), bits: flags.bits() }
        })
    }
    fn is_full(&self) -> bool {
        self.list.len() == self.list.capacity()
    }
    /// Appends an event; callers check `is_full` first, so this never grows
    /// the buffer.
    fn push(&mut self, token: Token, bits: u32) {
        debug_assert!(!self.is_full());
        self.list
            .push(EpollEvent { flags: EventFlags::from_bits_retain(bits), data: EventData::new_u64(token.0 as u64) });
    }
}

/// Wakes a `wait` blocked in another thread. Cheap to clone and `Send`.
#[derive(Clone, Debug)]
pub struct Waker {
    eventfd: Arc<OwnedFd>,
}

impl Waker {
    pub(crate) fn new() -> Result<(Waker, RawFd)> {
        let fd = sys::eventfd().map_err(|e| Error::sys("waker", Syscall::Eventfd2, None, e))?;
        let raw = fd.as_raw_fd();
        Ok((Waker { eventfd: Arc::new(fd) }, raw))
    }

    /// Its eventfd, for a signal's handler to write to (which must not
    /// allocate, as [`Waker::wake`]'s errors would).
    pub(crate) fn eventfd(&self) -> Arc<OwnedFd> {
        self.eventfd.clone()
    }

    /// Makes the poller's current or next `wait` return with the waker's
    /// token as a readable event.
    pub fn wake(&self) -> Result<()> {
        let fd = self.eventfd.as_raw_fd();
        match sys::eventfd_signal(fd) {
            Ok(()) => Ok(()),
            // The counter is saturated, so a wake is already pending.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(Error::sys("waker", Syscall::Write, Some(fd), e)),
        }
    }
}

/// One readiness mechanism. See the module docs for the contract.
pub trait Poller: Send {
    /// The mechanism's name, as in errors.
    fn name(&self) -> &'static str;
    /// Whether `add`/`modify` accept this mode.
    fn supports(&self, mode: Mode) -> bool;
    /// Registers `fd`; `AlreadyExists` if it is registered.
    fn add(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()>;
    /// Changes a registration (and re-arms a oneshot one); `NotFound` if none.
    fn modify(&mut self, fd: RawFd, token: Token, interest: Interest, mode: Mode) -> Result<()>;
    /// Forgets `fd`; `NotFound` if it is not registered. Call before close.
    fn delete(&mut self, fd: RawFd) -> Result<()>;
    /// Waits until an event, the timeout (`None`: forever) or a wake, and
    /// fills `events` (cleared first). Returns the number of events; 0 on
    /// timeout or when a signal interrupted the wait.
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) -> Result<usize>;
    /// The poller's waker; its wakes arrive as readable events for `token`.
    /// One per poller: a second call gives `AlreadyExists`.
    fn waker(&mut self, token: Token) -> Result<Waker>;
}

fn unsupported(backend: &'static str, mode: Mode) -> Error {
    Error::Unsupported { backend, mode }
}

/// A mechanism, chosen by name at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// select(2): at most FD_SETSIZE (1024) descriptors, all numbered below it.
    Select,
    /// poll(2).
    Poll,
    /// epoll, level-triggered.
    Epoll,
    /// epoll, edge-triggered.
    EpollEt,
    /// io_uring (at the readiness layer: IORING_OP_POLL_ADD; in the
    /// runtime: the completion driver).
    Uring,
    /// io_uring with a kernel thread polling the submission queue.
    UringSqpoll,
}

impl Backend {
    /// Every backend, in the order of [`Backend::NAMES`].
    pub const ALL: &'static [Backend] =
        &[Backend::Select, Backend::Poll, Backend::Epoll, Backend::EpollEt, Backend::Uring, Backend::UringSqpoll];
    /// The name of each backend, as [`FromStr`] takes it.
    pub const NAMES: &'static [&'static str] = &["select", "poll", "epoll", "epoll-et", "uring", "uring-sqpoll"];
    /// The environment variable that picks the default backend.
    pub const ENV: &'static str = "IOMUX_BACKEND";

    /// The backend's name, as in [`Backend::NAMES`].
    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|&b| b == self).unwrap_or(0)]
    }

    /// Whether the runtime runs this backend with its completion driver.
    pub(crate) fn is_uring(self) -> bool {
        matches!(self, Backend::Uring | Backend::UringSqpoll)
    }

    /// The mode a server on this backend registers connections with.
    pub fn mode(self) -> Mode {
        match self {
            Backend::EpollEt => Mode::Edge,
            _ => Mode::Level,
        }
    }

    /// `IOMUX_BACKEND` if set (an error if it names no backend), else epoll.
    pub fn from_env() -> Result<Backend> {
        match std::env::var(Self::ENV) {
            Ok(name) => name.parse(),
            Err(_) => Ok(Backend::Epoll),
        }
    }

    /// Opens a poller of this mechanism.
    pub fn open(self) -> Result<Box<dyn Poller>> {
        Ok(match self {
            Backend::Select => Box::new(SelectPoller::new()?),
            Backend::Poll => Box::new(PollPoller::new()?),
            Backend::Epoll | Backend::EpollEt => Box::new(EpollPoller::new()?),
            Backend::Uring => Box::new(UringPoller::new()?),
            Backend::UringSqpoll => Box::new(UringPoller::with_sqpoll()?),
        })
    }
}

impl FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Backend> {
        Self::NAMES
            .iter()
            .position(|&n| n == s)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| Error::UnknownBackend { name: s.to_string() })
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
