//! Errors a user can act on: each names the backend, the descriptor and,
//! for kernel errors, the syscall that failed.

use crate::poller::Mode;
use crate::syscalls::Syscall;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// The result type of every fallible iomux call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with enough context to act on it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The mechanism cannot provide this mode (e.g. edge triggering on poll).
    Unsupported {
        /// The backend asked.
        backend: &'static str,
        /// The mode it cannot provide.
        mode: Mode,
    },
    /// `add` of a descriptor that is already registered.
    AlreadyExists {
        /// The backend asked.
        backend: &'static str,
        /// The descriptor.
        fd: RawFd,
    },
    /// `modify`/`delete` of a descriptor that is not registered.
    NotFound {
        /// The backend asked.
        backend: &'static str,
        /// The descriptor.
        fd: RawFd,
    },
    /// select cannot watch this descriptor: its number is not below
    /// FD_SETSIZE, or the set already holds FD_SETSIZE descriptors.
    FdSetSize {
        /// The descriptor refused.
        fd: RawFd,
        /// How many descriptors the set holds.
        registered: usize,
    },
    /// io_uring cannot be used here; `reason` says why and how to fix it.
    UringUnavailable {
        /// Why, and what would fix it.
        reason: String,
        /// The kernel's error.
        source: io::Error,
    },
    /// A syscall failed.
    Sys {
        /// The backend (or layer: "listen", "connect", "signals") that made it.
        backend: &'static str,
        /// The call.
        syscall: Syscall,
        /// The descriptor it was made on, if any.
        fd: Option<RawFd>,
        /// The kernel's error.
        source: io::Error,
    },
    /// A negative descriptor number was given.
    BadFd {
        /// The backend asked.
        backend: &'static str,
        /// The number.
        fd: RawFd,
    },
    /// The connection id names no open connection (it closed).
    NoConnection {
        /// What was asked of it ("peer address").
        what: &'static str,
    },
    /// A backend name that is not one of [`crate::Backend::NAMES`].
    UnknownBackend {
        /// The name given.
        name: String,
    },
    /// A configuration value is out of range.
    InvalidConfig {
        /// The setting, as the builder method names it.
        field: &'static str,
        /// What it must be.
        reason: String,
    },
    /// A listener could not bind `addr`.
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The kernel's error.
        source: io::Error,
    },
    /// A listener could not be made at the Unix socket `path`.
    BindUnix {
        /// The path.
        path: std::path::PathBuf,
        /// The kernel's error.
        source: io::Error,
    },
    /// A loop thread could not be started.
    Spawn(io::Error),
    /// A loop's handler panicked; the other loops were stopped.
    LoopPanicked,
    /// The loop is stopping: it opens no new connection.
    Stopping,
    /// A connection's [`Layer`](crate::runtime::Layer) (TLS) refused
    /// bytes: the peer's (garbage, a truncated record, a version it does
    /// not speak) or the handler's.
    Layer {
        /// The layer's name ("tls").
        layer: &'static str,
        /// What it refused, in its words.
        reason: String,
    },
    /// A message was sent to a loop that has ended
    /// ([`Sender::send`](crate::runtime::Sender::send)); it was dropped.
    LoopEnded {
        /// The loop's index.
        loop_index: usize,
    },
}

impl Error {
    pub(crate) fn sys(backend: &'static str, syscall: Syscall, fd: Option<RawFd>, source: io::Error) -> Error {
        Error::Sys { backend, syscall, fd, source }
    }

    /// The call that failed, for a kernel error ([`Error::Sys`]).
    pub fn syscall(&self) -> Option<Syscall> {
        match self {
            Error::Sys { syscall, .. } => Some(*syscall),
            _ => None,
        }
    }

    /// The OS error number behind this error, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Sys { source, .. }
            | Error::UringUnavailable { source, .. }
            | Error::Bind { source, .. }
            | Error::BindUnix { source, .. }
            | Error::Spawn(source) => source.raw_os_error(),
            // What the kernel answers for one.
            Error::BadFd { .. } => Some(libc::EBADF),
            _ => None,
        }
    }

    /// The closest `std::io::ErrorKind`.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Unsupported { .. } => io::ErrorKind::Unsupported,
            Error::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
            Error::NotFound { .. } => io::ErrorKind::NotFound,
            Error::FdSetSize { .. } | Error::BadFd { .. } => io::ErrorKind::InvalidInput,
            Error::NoConnection { .. } => io::ErrorKind::NotConnected,
            Error::UringUnavailable { .. } => io::ErrorKind::Unsupported,
            Error::Sys { source, .. } => source.kind(),
            Error::UnknownBackend { .. } | Error::InvalidConfig { .. } => io::ErrorKind::InvalidInput,
            Error::Bind { source, .. } | Error::BindUnix { source, .. } | Error::Spawn(source) => source.kind(),
            Error::LoopPanicked => io::ErrorKind::Other,
            Error::Stopping => io::ErrorKind::NotConnected,
            Error::LoopEnded { .. } => io::ErrorKind::BrokenPipe,
            Error::Layer { .. } => io::ErrorKind::InvalidData,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unsupported { backend, mode } => {
                write!(f, "{backend}: {mode:?} mode is not supported by this mechanism")
            }
            Error::AlreadyExists { backend, fd } => write!(f, "{backend}: fd {fd} is already registered"),
            Error::NotFound { backend, fd } => write!(f, "{backend}: fd {fd} is not registered"),
            Error::FdSetSize { fd, registered } => write!(
                f,
                "select: cannot watch fd {fd} ({registered} fds registered): select handles only fd numbers \
                 below FD_SETSIZE ({}) and at most that many fds; use poll, epoll or uring",
                crate::sys::FD_SETSIZE
            ),
            // The kernel's error is the source, not part of the message:
            // a reporter that walks the chain would print it twice.
            Error::UringUnavailable { reason, .. } => write!(f, "io_uring unavailable: {reason}"),
            Error::Sys { backend, syscall, fd: Some(fd), .. } => {
                write!(f, "{backend}: {} on fd {fd} failed", syscall.name())
            }
            Error::Sys { backend, syscall, fd: None, .. } => write!(f, "{backend}: {} failed", syscall.name()),
            Error::BadFd { backend, fd } => write!(f, "{backend}: {fd} is not a descriptor"),
            Error::NoConnection { what } => write!(f, "{what}: no open connection has this id"),
            Error::UnknownBackend { name } => {
                write!(f, "unknown backend '{name}'; valid backends: {}", crate::Backend::NAMES.join(", "))
            }
            Error::InvalidConfig { field, reason } => write!(f, "invalid {field}: {reason}"),
            Error::Bind { addr, source } => {
                let why = match source.raw_os_error() {
                    Some(libc::EADDRINUSE) => " (address in use: another server is listening there)",
                    Some(libc::EADDRNOTAVAIL) => " (no such local address)",
                    Some(libc::EACCES) => " (a port below 1024 needs privileges)",
                    _ => "",
                };
                write!(f, "cannot listen on {addr}{why}")
            }
            Error::BindUnix { path, source } => {
                let why = match source.raw_os_error() {
                    Some(libc::EADDRINUSE) => " (the path exists: remove a stale socket file first)",
                    Some(libc::ENOENT) => " (its folder does not exist)",
                    Some(libc::EACCES) => " (no permission to create it there)",
                    _ => "",
                };
                write!(f, "cannot listen on unix:{}{why}", path.display())
            }
            Error::Spawn(_) => f.write_str("cannot start a loop thread"),
            Error::LoopPanicked => f.write_str("a loop's handler panicked; the other loops were stopped"),
            Error::Stopping => f.write_str("the loop is stopping: no new connection"),
            Error::LoopEnded { loop_index } => write!(f, "loop {loop_index} has ended: the message was dropped"),
            Error::Layer { layer, reason } => write!(f, "{layer}: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sys { source, .. }
            | Error::UringUnavailable { source, .. }
            | Error::Bind { source, .. }
            | Error::BindUnix { source, .. }
            | Error::Spawn(source) => Some(source),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// The message names the call; the kernel's error is its source,
    /// printed once by whoever walks the chain.
    #[test]
    fn display_leaves_the_cause_to_the_source() {
        let e = Error::sys("epoll", Syscall::EpollCtl, Some(5), io::Error::from_raw_os_error(libc::EBADF));
        assert_eq!(e.to_string(), "epoll: epoll_ctl on fd 5 failed");
        let cause = e.source().expect("the kernel's error").to_string();
        assert!(cause.contains("Bad file descriptor"), "{cause}");
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        let bind = Error::Bind {
            addr: "127.0.0.1:80".parse().unwrap(),
            source: io::Error::from_raw_os_error(libc::EADDRINUSE),
        };
        assert!(!bind.to_string().contains("os error"), "{bind}");
    }
}
