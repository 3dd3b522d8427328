//! The safe face of c/epoll_echo.c: a plain C level-triggered epoll echo
//! server, one thread.

use std::ffi::{c_char, c_int, CStr};
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;

extern "C" {
    /// Makes `listen_fd` non-blocking and returns a new epoll descriptor
    /// watching it, or -errno with `*failed` naming the call.
    fn c_epoll_echo_open(listen_fd: c_int, failed: *mut *const c_char) -> c_int;
    /// Serves until something stops the server; returns -errno with
    /// `*failed` naming the call, after closing every connection it
    /// accepted. Closes neither descriptor it was given.
    fn c_epoll_echo_serve(epoll_fd: c_int, listen_fd: c_int, failed: *mut *const c_char) -> c_int;
}

pub fn serve(listener: TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    let mut failed: *const c_char = ptr::null();
    // SAFETY: the listener's descriptor stays open for the call (the
    // listener lives to the end of this function), and `failed` is a
    // valid place for the C side to store a pointer.
    let ep = unsafe { c_epoll_echo_open(listener.as_raw_fd(), &mut failed) };
    if ep < 0 {
        return Err(c_error(ep, failed));
    }
    // SAFETY: a non-negative result is a new epoll descriptor that nothing
    // else owns: closing it is now the OwnedFd's job.
    let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
    ready()?;
    // SAFETY: both descriptors stay open for the call (`epoll` and
    // `listener` are dropped after it), and `failed` is as above.
    let r = unsafe { c_epoll_echo_serve(epoll.as_raw_fd(), listener.as_raw_fd(), &mut failed) };
    Err(c_error(r, failed))
}

/// The error of a C call that returned `r` (-errno) and named the failing
/// call in `failed`.
fn c_error(r: c_int, failed: *const c_char) -> io::Error {
    if r >= 0 {
        return io::Error::other("c_epoll_echo_serve returned without an error");
    }
    let os = io::Error::from_raw_os_error(-r);
    let call = if failed.is_null() {
        "c_epoll_echo".into()
    } else {
        // SAFETY: whenever the C side returns < 0 it sets `failed` to a
        // string literal: static and NUL-terminated.
        unsafe { CStr::from_ptr(failed) }.to_string_lossy()
    };
    io::Error::new(os.kind(), format!("{call}: {os}"))
}
