//! Sockets, descriptors, resource usage and signals: counted, direct
//! syscalls like the rest of `sys`.
#![allow(unsafe_code)]

use super::direct::syscall;
use super::{count, Syscall};
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// An owned descriptor whose close goes through the counted `close`.
#[derive(Debug)]
pub struct Fd(RawFd);

impl Fd {
    /// Takes ownership of a descriptor a syscall of this module just returned.
    fn from_new(fd: usize) -> Fd {
        Fd(fd as RawFd)
    }
    /// Takes ownership of a descriptor an io_uring completion returned.
    pub(crate) fn adopt_new(fd: i32) -> Fd {
        Fd(fd)
    }
    /// Gives up ownership without closing (someone else will close it).
    pub fn into_raw(self) -> RawFd {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
    pub fn raw(&self) -> RawFd {
        self.0
    }
}

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // Nothing useful can be done about a failed close of a socket we
        // are discarding: the descriptor is released either way on Linux.
        let _ = close(self.0);
    }
}

/// `close(2)`, for descriptors this crate owns (Fd's drop).
pub(crate) fn close(fd: RawFd) -> io::Result<()> {
    count(Syscall::Close);
    // SAFETY: close takes no pointers; callers own `fd` (Fd's drop).
    unsafe { syscall!(libc::SYS_close, fd) }.map(drop)
}

/// A socket address in the kernel's layout.
#[repr(C)]
pub struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    pub fn new(addr: &SocketAddr) -> RawAddr {
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // sockaddr_in, which we write at its start.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for sockaddr_in6.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
                size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr { storage, len: len as libc::socklen_t }
    }

    fn empty() -> RawAddr {
        // SAFETY: plain old data; all-zero is valid.
        RawAddr {
            storage: unsafe { MaybeUninit::zeroed().assume_init() },
            len: size_of::<libc::sockaddr_storage>() as _,
        }
    }

    pub fn as_ptr(&self) -> *const libc::sockaddr {
        (&self.storage as *const libc::sockaddr_storage).cast()
    }

    pub fn len(&self) -> libc::socklen_t {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn to_socket_addr(&self) -> io::Result<SocketAddr> {
        match self.storage.ss_family as libc::c_int {
            libc::AF_INET => {
                // SAFETY: the family says the kernel wrote a sockaddr_in.
                let sin: libc::sockaddr_in = unsafe { std::ptr::read(self.as_ptr().cast()) };
                let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
                Ok(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the kernel wrote a sockaddr_in6.
                let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read(self.as_ptr().cast()) };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Ok(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            f => Err(io::Error::new(io::ErrorKind::InvalidData, format!("address family {f}"))),
        }
    }
}

fn family(addr: &SocketAddr) -> libc::c_int {
    match addr.ip() {
        IpAddr::V4(_) => libc::AF_INET,
        IpAddr::V6(_) => libc::AF_INET6,
    }
}

/// A TCP socket (SOCK_CLOEXEC, and SOCK_NONBLOCK unless `blocking`).
pub fn tcp_socket(addr: &SocketAddr, blocking: bool) -> io::Result<Fd> {
    count(Syscall::Socket);
    let mut ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if !blocking {
        ty |= libc::SOCK_NONBLOCK;
    }
    // SAFETY: no pointers; a new descriptor is ours to own.
    unsafe { syscall!(libc::SYS_socket, family(addr), ty, 0) }.map(Fd::from_new)
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    count(Syscall::Setsockopt);
    let ptr: *const libc::c_int = &value;
    // SAFETY: ptr points at a live c_int and its size is passed with it.
    unsafe { syscall!(libc::SYS_setsockopt, fd, level, name, ptr, size_of::<libc::c_int>()) }.map(drop)
}

pub fn set_reuse_addr(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
}

pub fn set_reuse_port(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)
}

pub fn set_nodelay(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// Whether TCP_NODELAY is set.
pub fn nodelay(fd: RawFd) -> io::Result<bool> {
    count(Syscall::Getsockopt);
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    let (vp, lp): (*mut libc::c_int, *mut libc::socklen_t) = (&mut value, &mut len);
    // SAFETY: vp and lp point at live locals of the sizes the kernel expects.
    unsafe { syscall!(libc::SYS_getsockopt, fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, vp, lp) }?;
    Ok(value != 0)
}

/// IP_BIND_ADDRESS_NO_PORT: bind a source address now, pick the port at
/// connect time, so many source addresses multiply the usable ports.
pub fn set_bind_address_no_port(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)
}

/// SO_LINGER with a zero timeout: close sends RST (tests of resets).
pub fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    count(Syscall::Setsockopt);
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    let ptr: *const libc::linger = &linger;
    // SAFETY: ptr points at a live linger and its size is passed with it.
    unsafe { syscall!(libc::SYS_setsockopt, fd, libc::SOL_SOCKET, libc::SO_LINGER, ptr, size_of::<libc::linger>()) }
        .map(drop)
}

pub fn bind(fd: RawFd, addr: &SocketAddr) -> io::Result<()> {
    count(Syscall::Bind);
    let raw = RawAddr::new(addr);
    // SAFETY: raw holds a valid sockaddr of raw.len() bytes.
    unsafe { syscall!(libc::SYS_bind, fd, raw.as_ptr(), raw.len()) }.map(drop)
}

pub fn listen(fd: RawFd, backlog: i32) -> io::Result<()> {
    count(Syscall::Listen);
    // SAFETY: no pointers.
    unsafe { syscall!(libc::SYS_listen, fd, backlog) }.map(drop)
}

/// A non-blocking TCP listener on `addr`, with SO_REUSEADDR (and
/// SO_REUSEPORT when several loops share the address).
/// TCP_NODELAY is set on the listener: accepted connections inherit it
/// (Linux clones the listener's Nagle setting), which saves a setsockopt
/// per connection.
pub fn tcp_listener(addr: &SocketAddr, reuse_port: bool, backlog: i32) -> io::Result<Fd> {
    let fd = tcp_socket(addr, false)?;
    set_reuse_addr(fd.raw())?;
    set_nodelay(fd.raw())?;
    if reuse_port {
        set_reuse_port(fd.raw())?;
    }
    bind(fd.raw(), addr)?;
    listen(fd.raw(), backlog)?;
    Ok(fd)
}

/// `accept4` of one connection, non-blocking and close-on-exec.
pub fn accept(fd: RawFd) -> io::Result<Fd> {
    count(Syscall::Accept4);
    // SAFETY: null address pointers: the kernel writes no peer address.
    unsafe { syscall!(libc::SYS_accept4, fd, 0usize, 0usize, libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) }
        .map(Fd::from_new)
}

/// `connect`: Ok(true) when connected at once, Ok(false) when in progress
/// (a non-blocking socket; writability will say when it is done).
pub fn connect(fd: RawFd, addr: &SocketAddr) -> io::Result<bool> {
    count(Syscall::Connect);
    let raw = RawAddr::new(addr);
    // SAFETY: raw holds a valid sockaddr of raw.len() bytes.
    match unsafe { syscall!(libc::SYS_connect, fd, raw.as_ptr(), raw.len()) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The pending error of a socket (SO_ERROR), e.g. of a finished connect.
pub fn take_socket_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    count(Syscall::Getsockopt);
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    let (vp, lp): (*mut libc::c_int, *mut libc::socklen_t) = (&mut value, &mut len);
    // SAFETY: vp and lp point at live locals of the sizes the kernel expects.
    unsafe { syscall!(libc::SYS_getsockopt, fd, libc::SOL_SOCKET, libc::SO_ERROR, vp, lp) }?;
    Ok((value != 0).then(|| io::Error::from_raw_os_error(value)))
}

pub fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    count(Syscall::Getsockname);
    let mut raw = RawAddr::empty();
    let (sp, lp): (*mut libc::sockaddr_storage, *mut libc::socklen_t) = (&mut raw.storage, &mut raw.len);
    // SAFETY: sp points at a sockaddr_storage whose size is in *lp.
    unsafe { syscall!(libc::SYS_getsockname, fd, sp, lp) }?;
    raw.to_socket_addr()
}

/// `shutdown(fd, SHUT_WR)`: send FIN, keep reading.
pub fn shutdown_write(fd: RawFd) -> io::Result<()> {
    count(Syscall::Shutdown);
    // SAFETY: no pointers.
    unsafe { syscall!(libc::SYS_shutdown, fd, libc::SHUT_WR) }.map(drop)
}

/// CPU time and peak memory of this process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    /// ru_maxrss, in bytes.
    pub peak_rss: u64,
}

pub fn usage() -> io::Result<Usage> {
    count(Syscall::Getrusage);
    // SAFETY: rusage is plain old data; all-zero is valid.
    let mut ru: libc::rusage = unsafe { MaybeUninit::zeroed().assume_init() };
    let ptr: *mut libc::rusage = &mut ru;
    // SAFETY: ptr points at a live rusage the kernel fills in.
    unsafe { syscall!(libc::SYS_getrusage, libc::RUSAGE_SELF, ptr) }?;
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok(Usage { user: tv(ru.ru_utime), system: tv(ru.ru_stime), peak_rss: ru.ru_maxrss as u64 * 1024 })
}

/// The process image's peak resident memory, in bytes (VmHWM from
/// /proc/self/status). Unlike ru_maxrss it excludes the parent's pages a
/// child inherited between fork and exec.
pub fn peak_rss() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no VmHWM in /proc/self/status"))
}

/// Resident memory now, in bytes (from /proc/self/statm).
pub fn current_rss() -> io::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/self/statm"))?;
    // SAFETY: sysconf takes no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Ok(pages * page.max(4096) as u64)
}

fn sigset(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill the set we own;
    // they fail only for invalid signal numbers, which then stay out.
    unsafe {
        let mut set: libc::sigset_t = MaybeUninit::zeroed().assume_init();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks `signals` in this thread (and the threads it spawns later), so
/// that only [`wait_signal`] receives them.
pub fn block_signals(signals: &[libc::c_int]) -> io::Result<()> {
    let set = sigset(signals);
    // SAFETY: set is a valid sigset_t; the old mask is not wanted (null).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for one of the (blocked) `signals` and returns its number.
pub fn wait_signal(signals: &[libc::c_int]) -> io::Result<libc::c_int> {
    let set = sigset(signals);
    let mut sig: libc::c_int = 0;
    // SAFETY: set is valid; sig is a live c_int the call writes.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(sig)
}

/// Pins the calling thread to one CPU (sched_setaffinity).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain old data; CPU_ZERO/CPU_SET only write
    // inside the set we own (CPU_SET ignores numbers beyond its size).
    let set = unsafe {
        let mut set: libc::cpu_set_t = MaybeUninit::zeroed().assume_init();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        set
    };
    let ptr: *const libc::cpu_set_t = &set;
    // SAFETY: ptr points at a live cpu_set_t whose size is passed with it.
    unsafe { syscall!(libc::SYS_sched_setaffinity, 0, size_of::<libc::cpu_set_t>(), ptr) }.map(drop)
}

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: no pointers.
    unsafe { syscall!(libc::SYS_kill, pid, signal) }.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_connections_inherit_nodelay_from_the_listener() {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let listener = tcp_listener(&addr, false, 16).unwrap();
        let bound = local_addr(listener.raw()).unwrap();
        let client = std::net::TcpStream::connect(bound).unwrap();
        let accepted = loop {
            match accept(listener.raw()) {
                Ok(fd) => break fd,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("accept: {e}"),
            }
        };
        assert!(nodelay(accepted.raw()).unwrap(), "TCP_NODELAY not inherited");
        assert!(!client.nodelay().unwrap(), "a plain socket does not have it");
    }
}
