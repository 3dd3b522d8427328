//! The safe face of the C servers: c/epoll_echo.c, a plain C
//! level-triggered epoll echo server, c/resp_floor.c and c/http_floor.c,
//! the least a RESP or an HTTP/1.1 server can do per request, and
//! c/relay_floor.c, the least a TCP proxy can do per message. One thread
//! each.

use std::ffi::{c_char, c_int, CStr};
use std::io;
use std::net::{SocketAddrV4, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;

/// A C server's two calls: `open` makes `listen_fd` non-blocking and
/// returns a new epoll descriptor watching it, or -errno with `*failed` naming the call; `serve` serves
/// until something stops it and returns -errno with `*failed` naming the
/// call. Neither closes a descriptor it was given.
type Open = unsafe extern "C" fn(listen_fd: c_int, failed: *mut *const c_char) -> c_int;
type Serve = unsafe extern "C" fn(epoll_fd: c_int, listen_fd: c_int, failed: *mut *const c_char) -> c_int;

extern "C" {
    fn c_epoll_echo_open(listen_fd: c_int, failed: *mut *const c_char) -> c_int;
    /// Closes every connection it accepted before it returns.
    fn c_epoll_echo_serve(epoll_fd: c_int, listen_fd: c_int, failed: *mut *const c_char) -> c_int;
    fn c_resp_floor_open(listen_fd: c_int, failed: *mut *const c_char) -> c_int;
    fn c_resp_floor_serve(epoll_fd: c_int, listen_fd: c_int, failed: *mut *const c_char) -> c_int;
    fn c_pubsub_floor_serve(epoll_fd: c_int, listen_fd: c_int, failed: *mut *const c_char) -> c_int;
    fn c_http_floor_serve(epoll_fd: c_int, listen_fd: c_int, failed: *mut *const c_char) -> c_int;
    fn c_relay_floor_serve(
        epoll_fd: c_int,
        listen_fd: c_int,
        upstream: *const libc::sockaddr_in,
        failed: *mut *const c_char,
    ) -> c_int;
}

pub fn serve(listener: TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    serve_c(listener, ready, c_epoll_echo_open, c_epoll_echo_serve)
}

pub fn serve_resp_floor(listener: TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    serve_c(listener, ready, c_resp_floor_open, c_resp_floor_serve)
}

/// c/pubsub_floor.c: the least a pub/sub server's fan-out can do.
pub fn serve_pubsub_floor(listener: TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    serve_c(listener, ready, c_resp_floor_open, c_pubsub_floor_serve)
}

/// c/http_floor.c: the least an HTTP/1.1 server can do per request.
pub fn serve_http_floor(listener: TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    serve_c(listener, ready, c_resp_floor_open, c_http_floor_serve)
}

/// The relay floor to `upstream` (IPv4: the lab's loopback).
pub fn serve_relay_floor(
    listener: TcpListener,
    upstream: SocketAddrV4,
    ready: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    let up = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: upstream.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*upstream.ip()).to_be() },
        sin_zero: [0; 8],
    };
    let mut failed: *const c_char = ptr::null();
    // SAFETY: the listener's descriptor stays open for the call, and
    // `failed` is a valid place for the C side to store a pointer.
    // The RESP floor's open serves both floors: the listener made
    // non-blocking in a new epoll set.
    let ep = unsafe { c_resp_floor_open(listener.as_raw_fd(), &mut failed) };
    if ep < 0 {
        return Err(c_error(ep, failed));
    }
    // SAFETY: a non-negative result is a new epoll descriptor nothing else owns.
    let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
    ready()?;
    // SAFETY: both descriptors stay open for the call, `up` is a valid
    // sockaddr_in that outlives it (the C side only reads it), and
    // `failed` is as above.
    let r = unsafe { c_relay_floor_serve(epoll.as_raw_fd(), listener.as_raw_fd(), &up, &mut failed) };
    Err(c_error(r, failed))
}

fn serve_c(listener: TcpListener, ready: impl FnOnce() -> io::Result<()>, open: Open, serve: Serve) -> io::Result<()> {
    let mut failed: *const c_char = ptr::null();
    // SAFETY: the listener's descriptor stays open for the call (the
    // listener lives to the end of this function), and `failed` is a
    // valid place for the C side to store a pointer.
    let ep = unsafe { open(listener.as_raw_fd(), &mut failed) };
    if ep < 0 {
        return Err(c_error(ep, failed));
    }
    // SAFETY: a non-negative result is a new epoll descriptor that nothing
    // else owns: closing it is now the OwnedFd's job.
    let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
    ready()?;
    // SAFETY: both descriptors stay open for the call (`epoll` and
    // `listener` are dropped after it), and `failed` is as above.
    let r = unsafe { serve(epoll.as_raw_fd(), listener.as_raw_fd(), &mut failed) };
    Err(c_error(r, failed))
}

/// The error of a C call that returned `r` (-errno) and named the failing
/// call in `failed`.
fn c_error(r: c_int, failed: *const c_char) -> io::Error {
    if r >= 0 {
        return io::Error::other("a C server returned without an error");
    }
    let os = io::Error::from_raw_os_error(-r);
    let call = if failed.is_null() {
        "a C server".into()
    } else {
        // SAFETY: whenever the C side returns < 0 it sets `failed` to a
        // string literal: static and NUL-terminated.
        unsafe { CStr::from_ptr(failed) }.to_string_lossy()
    };
    io::Error::new(os.kind(), format!("{call}: {os}"))
}
