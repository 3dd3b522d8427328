//! Sockets and descriptors: counted syscalls through rustix, like the rest
//! of `sys`.
#![allow(unsafe_code)]

use super::borrow;
use crate::syscalls::{count, Syscall};
use rustix::net::{self as rx, sockopt, AddressFamily, SocketFlags, SocketType};
use std::io;
use std::net::SocketAddr;
use std::path::Path;

/// Any socket address a connect takes: an IP address and port, or a Unix
/// socket's path (rustix's, which holds either in one sockaddr storage).
pub(crate) use rx::SocketAddrAny as AnyAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};

/// An owned descriptor whose close goes through the counted `close`.
///
#[derive(Debug)]
pub(crate) struct Fd(RawFd);

impl Fd {
    /// Takes ownership of a descriptor a syscall of this module just returned.
    fn from_owned(fd: OwnedFd) -> Fd {
        Fd(fd.into_raw_fd())
    }
    /// Takes ownership of a descriptor an io_uring completion returned.
    pub(crate) fn adopt_new(fd: i32) -> Fd {
        Fd(fd)
    }
    /// No descriptor: the place of one whose socket could not be made
    /// (a connect that failed at once); dropping it closes nothing.
    pub(crate) fn none() -> Fd {
        Fd(-1)
    }
    /// Whether this stands for no descriptor ([`Fd::none`]).
    pub(crate) fn is_none(&self) -> bool {
        self.0 < 0
    }
    /// Gives up ownership without closing (someone else will close it).
    pub(crate) fn into_raw(self) -> RawFd {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
    pub(crate) fn raw(&self) -> RawFd {
        self.0
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: an Fd owns its descriptor, open until the Fd is dropped
        // (or given away by into_raw, which consumes it), so it outlives
        // the borrow. Fds come from successful syscalls: never -1.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        if self.is_none() {
            return;
        }
        count(Syscall::Close);
        // SAFETY: we own the descriptor and nothing uses the number after
        // this. (Nothing useful can be done about a failed close of a
        // socket we are discarding: Linux releases the number either way,
        // which is why rustix's close returns nothing.)
        unsafe { rustix::io::close(self.0) };
    }
}

/// A TCP socket (SOCK_CLOEXEC, and SOCK_NONBLOCK unless `blocking`).
pub(crate) fn tcp_socket(addr: &SocketAddr, blocking: bool) -> io::Result<Fd> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let mut flags = SocketFlags::CLOEXEC;
    if !blocking {
        flags |= SocketFlags::NONBLOCK;
    }
    count(Syscall::Socket);
    Ok(Fd::from_owned(rx::socket_with(family, SocketType::STREAM, flags, None)?))
}

/// A Unix stream socket, non-blocking and close-on-exec.
pub(crate) fn unix_socket() -> io::Result<Fd> {
    count(Syscall::Socket);
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    Ok(Fd::from_owned(rx::socket_with(AddressFamily::UNIX, SocketType::STREAM, flags, None)?))
}

/// The address of the Unix socket at `path`.
pub(crate) fn unix_addr(path: &Path) -> io::Result<AnyAddr> {
    Ok(AnyAddr::from(rx::SocketAddrUnix::new(path)?))
}

/// A non-blocking Unix stream listener at `path` (which must not exist:
/// a stale socket file is the caller's to remove, as it may be another
/// server's).
pub(crate) fn unix_listener(path: &Path, backlog: i32) -> io::Result<Fd> {
    let fd = unix_socket()?;
    count(Syscall::Bind);
    rx::bind(&fd, &rx::SocketAddrUnix::new(path)?)?;
    listen(fd.raw(), backlog)?;
    Ok(fd)
}

/// A duplicate of `fd` (close-on-exec), for another loop to own.
pub(crate) fn dup(fd: RawFd) -> io::Result<Fd> {
    let fd = borrow(fd)?;
    count(Syscall::Fcntl);
    Ok(Fd::from_owned(rustix::io::fcntl_dupfd_cloexec(fd, 0)?))
}

/// SO_LINGER with a zero timeout: the close that follows resets the
/// connection (RST) and drops what was queued, instead of a FIN after it.
pub(crate) fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Setsockopt);
    Ok(sockopt::set_socket_linger(fd, Some(std::time::Duration::ZERO))?)
}

pub(crate) fn set_reuse_addr(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Setsockopt);
    Ok(sockopt::set_socket_reuseaddr(fd, true)?)
}

pub(crate) fn set_reuse_port(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Setsockopt);
    Ok(sockopt::set_socket_reuseport(fd, true)?)
}

pub(crate) fn set_nodelay(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Setsockopt);
    Ok(sockopt::set_tcp_nodelay(fd, true)?)
}

/// Keepalive's idle time, probe interval and probe count.
pub(crate) type KeepaliveTimes = (std::time::Duration, std::time::Duration, u32);

/// Keepalive and TCP_USER_TIMEOUT, each if set.
pub(crate) type Liveness = (Option<KeepaliveTimes>, Option<std::time::Duration>);

/// TCP keepalive on (idle time, probe interval, probe count), and
/// TCP_USER_TIMEOUT: how long sent data may stay unacknowledged. Set on a
/// listener, accepted connections inherit them (Linux clones the
/// listener's socket, and arms the keepalive timer of the clone). Neither
/// set: no syscall.
pub(crate) fn set_liveness(fd: RawFd, (keepalive, user_timeout): Liveness) -> io::Result<()> {
    let fd = borrow(fd)?;
    if let Some((idle, interval, probes)) = keepalive {
        count(Syscall::Setsockopt);
        sockopt::set_tcp_keepidle(fd, idle)?;
        count(Syscall::Setsockopt);
        sockopt::set_tcp_keepintvl(fd, interval)?;
        count(Syscall::Setsockopt);
        sockopt::set_tcp_keepcnt(fd, probes)?;
        count(Syscall::Setsockopt);
        sockopt::set_socket_keepalive(fd, true)?;
    }
    if let Some(timeout) = user_timeout {
        // Milliseconds; the config checked that it fits.
        let ms = u32::try_from(timeout.as_millis()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        count(Syscall::Setsockopt);
        sockopt::set_tcp_user_timeout(fd, ms)?;
    }
    Ok(())
}

/// The keepalive settings (None when off) and TCP_USER_TIMEOUT in ms.
#[cfg(test)]
pub(crate) fn liveness(fd: RawFd) -> io::Result<(Option<KeepaliveTimes>, u32)> {
    let fd = borrow(fd)?;
    let keepalive = match sockopt::socket_keepalive(fd)? {
        false => None,
        true => Some((sockopt::tcp_keepidle(fd)?, sockopt::tcp_keepintvl(fd)?, sockopt::tcp_keepcnt(fd)?)),
    };
    Ok((keepalive, sockopt::tcp_user_timeout(fd)?))
}

/// Whether TCP_NODELAY is set.
#[cfg(test)]
pub(crate) fn nodelay(fd: RawFd) -> io::Result<bool> {
    let fd = borrow(fd)?;
    count(Syscall::Getsockopt);
    Ok(sockopt::tcp_nodelay(fd)?)
}

/// `send(MSG_NOSIGNAL)`: a write to a socket the peer reset fails with
/// EPIPE instead of raising SIGPIPE, whatever the process does with it.
pub(crate) fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    let fd = borrow(fd)?;
    count(Syscall::Sendto);
    Ok(rx::send(fd, buf, rx::SendFlags::NOSIGNAL)?)
}

/// `sendmsg` of several buffers in order, as one stream (a gathered send).
pub(crate) fn sendmsg(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    let fd = borrow(fd)?;
    count(Syscall::Sendmsg);
    Ok(rx::sendmsg(fd, bufs, &mut rx::SendAncillaryBuffer::default(), rx::SendFlags::NOSIGNAL)?)
}

/// `recv`, not `read`: read goes through the file layer (fdget_pos,
/// vfs_read), which cost 5.7% of an epoll server's CPU at 10,000
/// connections where recv's path cost 2.7% (perf, cpu-clock).
pub(crate) fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    let fd = borrow(fd)?;
    count(Syscall::Recvfrom);
    Ok(rx::recv(fd, buf, rx::RecvFlags::empty())?.0)
}

/// A pipe for splicing, both ends non-blocking: (read end, write end).
pub(crate) fn pipe() -> io::Result<(Fd, Fd)> {
    count(Syscall::Pipe2);
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK | rustix::pipe::PipeFlags::CLOEXEC)?;
    Ok((Fd::from_owned(r), Fd::from_owned(w)))
}

/// Moves up to `len` bytes from `from` to `to` (one of them a pipe) inside
/// the kernel, without blocking: pages are passed by reference where the
/// kernel can (a socket's receive queue into a pipe, a pipe into a send).
pub(crate) fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let (from, to) = (borrow(from)?, borrow(to)?);
    count(Syscall::Splice);
    let flags = rustix::pipe::SpliceFlags::NONBLOCK | rustix::pipe::SpliceFlags::MOVE;
    Ok(rustix::pipe::splice(from, None, to, None, len, flags)?)
}

/// SO_OOBINLINE: TCP urgent data stays in the stream, in order, as RFC
/// 6093 recommends, instead of leaving it as one byte nobody reads.
/// Accepted connections inherit it from the listener.
pub(crate) fn set_oob_inline(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Setsockopt);
    Ok(sockopt::set_socket_oobinline(fd, true)?)
}

/// IP_BIND_ADDRESS_NO_PORT: bind a source address now, pick the port at
/// connect time, so many source addresses multiply the usable ports.
///
/// rustix has no setter for this option, so this one call goes through
/// glibc's `setsockopt` (not a cancellation point, so nothing is lost).
pub(crate) fn set_bind_address_no_port(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?.as_raw_fd();
    count(Syscall::Setsockopt);
    let one: libc::c_int = 1;
    let (ptr, len): (*const libc::c_int, _) = (&one, std::mem::size_of::<libc::c_int>() as libc::socklen_t);
    // SAFETY: ptr points at a live c_int whose size is passed with it; the
    // kernel only reads it.
    let rc = unsafe { libc::setsockopt(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, ptr.cast(), len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn bind(fd: RawFd, addr: &SocketAddr) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Bind);
    Ok(rx::bind(fd, addr)?)
}

pub(crate) fn listen(fd: RawFd, backlog: i32) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Listen);
    Ok(rx::listen(fd, backlog)?)
}

/// A non-blocking TCP listener on `addr`, with SO_REUSEADDR (and
/// SO_REUSEPORT when several loops share the address).
/// TCP_NODELAY is set on the listener: accepted connections inherit it
/// (Linux clones the listener's Nagle setting), which saves a setsockopt
/// per connection.
/// Keepalive and the user timeout too, when given: set before `listen`, so
/// that no connection is accepted without them.
pub(crate) fn tcp_listener(addr: &SocketAddr, reuse_port: bool, backlog: i32, liveness: Liveness) -> io::Result<Fd> {
    let fd = tcp_socket(addr, false)?;
    set_reuse_addr(fd.raw())?;
    set_nodelay(fd.raw())?;
    set_oob_inline(fd.raw())?;
    set_liveness(fd.raw(), liveness)?;
    if reuse_port {
        set_reuse_port(fd.raw())?;
    }
    bind(fd.raw(), addr)?;
    listen(fd.raw(), backlog)?;
    Ok(fd)
}

/// `accept4` of one connection, non-blocking and close-on-exec.
pub(crate) fn accept(fd: RawFd) -> io::Result<Fd> {
    let fd = borrow(fd)?;
    count(Syscall::Accept4);
    Ok(Fd::from_owned(rx::accept_with(fd, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?))
}

/// `connect`: Ok(true) when connected at once, Ok(false) when in progress
/// (a non-blocking socket; writability will say when it is done).
pub(crate) fn connect(fd: RawFd, addr: &AnyAddr) -> io::Result<bool> {
    let fd = borrow(fd)?;
    count(Syscall::Connect);
    match rx::connect(fd, addr) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::INPROGRESS) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The pending error of a socket (SO_ERROR), e.g. of a finished connect.
pub(crate) fn take_socket_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let fd = borrow(fd)?;
    count(Syscall::Getsockopt);
    Ok(sockopt::socket_error(fd)?.err().map(io::Error::from))
}

pub(crate) fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    let fd = borrow(fd)?;
    count(Syscall::Getsockname);
    ip_address(rx::getsockname(fd)?)
}

/// The connected peer's address; NotConnected before a connect finishes.
pub(crate) fn peer_addr(fd: RawFd) -> io::Result<SocketAddr> {
    let fd = borrow(fd)?;
    count(Syscall::Getpeername);
    ip_address(rx::getpeername(fd)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?)
}

fn ip_address(addr: rx::SocketAddrAny) -> io::Result<SocketAddr> {
    SocketAddr::try_from(addr).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket address"))
}

/// `ioctl(FIONREAD)`: bytes received and not yet read.
pub(crate) fn unread(fd: RawFd) -> io::Result<u64> {
    let fd = borrow(fd)?;
    count(Syscall::Ioctl);
    Ok(rustix::io::ioctl_fionread(fd)?)
}

/// `ioctl(SIOCATMARK)`'s request number: asm-generic/sockios.h's, which
/// x86, Arm and RISC-V use (MIPS, PowerPC, SPARC and Alpha have their
/// own); the libc crate does not export it.
const SIOCATMARK: rustix::ioctl::Opcode = 0x8905;

/// `ioctl(SIOCATMARK)`: whether the next unread byte is TCP urgent data's
/// mark. Exact where [`unread`] is not: bytes that arrive after a splice
/// returned EAGAIN do not put the socket at a mark.
pub(crate) fn at_urgent_mark(fd: RawFd) -> io::Result<bool> {
    let fd = borrow(fd)?;
    count(Syscall::Ioctl);
    // SAFETY: SIOCATMARK is a valid request on a socket; the kernel writes
    // at most one int through its argument (the Getter's output type),
    // and only on success, when rustix reads it.
    let at = unsafe { rustix::ioctl::ioctl(fd, rustix::ioctl::Getter::<SIOCATMARK, libc::c_int>::new()) }?;
    Ok(at != 0)
}

/// `ioctl(FIONBIO)`: the socket's own calls no longer block (io_uring's
/// sockets are made blocking, which splice(2) would then be).
pub(crate) fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Ioctl);
    Ok(rustix::io::ioctl_fionbio(fd, true)?)
}

/// Ends the socket's input here: a receive waiting on it completes with
/// 0, after reading what is queued (callers check that nothing is). The
/// call itself sends nothing (TCP); a Unix peer's later writes fail, as
/// they would after the close that follows.
pub(crate) fn shutdown_read(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Shutdown);
    Ok(rx::shutdown(fd, rx::Shutdown::Read)?)
}

/// `shutdown(fd, SHUT_WR)`: send FIN, keep reading.
pub(crate) fn shutdown_write(fd: RawFd) -> io::Result<()> {
    let fd = borrow(fd)?;
    count(Syscall::Shutdown);
    Ok(rx::shutdown(fd, rx::Shutdown::Write)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection accepted from a listener made with `liveness`, and
    /// the client's end of it.
    fn accepted_from(liveness: Liveness) -> (Fd, std::net::TcpStream) {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let listener = tcp_listener(&addr, false, 16, liveness).unwrap();
        let bound = local_addr(listener.raw()).unwrap();
        let client = std::net::TcpStream::connect(bound).unwrap();
        loop {
            match accept(listener.raw()) {
                Ok(fd) => return (fd, client),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("accept: {e}"),
            }
        }
    }

    #[test]
    fn accepted_connections_inherit_nodelay_from_the_listener() {
        let (accepted, client) = accepted_from((None, None));
        assert!(nodelay(accepted.raw()).unwrap(), "TCP_NODELAY not inherited");
        assert!(!client.nodelay().unwrap(), "a plain socket does not have it");
    }

    #[test]
    fn accepted_connections_inherit_keepalive_and_user_timeout() {
        use std::time::Duration;
        let keepalive = (Duration::from_secs(7), Duration::from_secs(3), 4);
        let (accepted, client) = accepted_from((Some(keepalive), Some(Duration::from_millis(21_500))));
        assert_eq!(liveness(accepted.raw()).unwrap(), (Some(keepalive), 21_500), "not inherited");
        let plain = liveness(client.as_raw_fd()).unwrap();
        assert_eq!(plain, (None, 0), "a plain socket has neither");
    }

    /// Only a socket whose next byte is urgent data's is at the mark:
    /// ordinary bytes waiting are not (FIONREAD could not tell them apart).
    #[test]
    fn the_urgent_mark_is_where_a_splice_stops() {
        let (accepted, mut client) = accepted_from((None, None));
        let fd = accepted.raw();
        let arrived = |n: u64| {
            while unread(fd).unwrap() < n {
                std::thread::yield_now();
            }
        };
        std::io::Write::write_all(&mut client, b"abc").unwrap();
        arrived(3);
        assert!(!at_urgent_mark(fd).unwrap(), "ordinary bytes waiting are no mark");
        // SAFETY: the descriptor is the client's, open; the buffer is one
        // live byte, its length passed with it.
        let sent = unsafe { libc::send(client.as_raw_fd(), b"!".as_ptr().cast(), 1, libc::MSG_OOB) };
        assert_eq!(sent, 1, "send(MSG_OOB): {}", io::Error::last_os_error());
        arrived(4);
        let (pipe_read, pipe_write) = pipe().unwrap();
        assert_eq!(splice(fd, pipe_write.raw(), 64).unwrap(), 3, "the splice stops before the urgent byte");
        let again = splice(fd, pipe_write.raw(), 64).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock, "and goes no further");
        assert!(at_urgent_mark(fd).unwrap(), "where it stopped is the mark");
        let mut byte = [0u8; 1];
        assert_eq!((recv(fd, &mut byte).unwrap(), byte), (1, *b"!"), "SO_OOBINLINE: the byte in the stream");
        assert!(!at_urgent_mark(fd).unwrap(), "past the mark");
        drop(pipe_read);
    }

    #[test]
    fn connect_in_progress_and_socket_errors() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let fd = tcp_socket(&addr, false).unwrap();
        set_bind_address_no_port(fd.raw()).unwrap();
        bind(fd.raw(), &"127.0.0.1:0".parse().unwrap()).unwrap();
        let _ = connect(fd.raw(), &AnyAddr::from(addr)).unwrap();
        let (_peer, _) = listener.accept().unwrap();
        assert!(take_socket_error(fd.raw()).unwrap().is_none());
        shutdown_write(fd.raw()).unwrap();
        assert_eq!(shutdown_write(-1).unwrap_err().raw_os_error(), Some(libc::EBADF));
    }
}
