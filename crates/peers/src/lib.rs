//! Echo servers on other runtimes, each written the way that runtime's own
//! examples write one, each on one thread: what the lab measures iomux's
//! echo server against. Bench-only; the iomux library never depends on it.

mod c_epoll;
mod compio_echo;
mod monoio_echo;
mod tokio_echo;
mod uring_relay_floor;

use std::fmt;
use std::io;
use std::net::TcpListener;
use std::str::FromStr;

/// Bytes each Rust peer reads per call: monoio's echo example's 8 KiB,
/// used by all three so that they differ only in their runtimes.
/// (tokio's example reads 1 KiB; the lab's messages are far smaller.)
const BUF_SIZE: usize = 8 * 1024;

/// One peer's echo server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// tokio, current-thread runtime (epoll), a task per connection.
    Tokio,
    /// monoio on its io_uring driver.
    MonoioUring,
    /// monoio on its legacy (epoll, through mio) driver.
    MonoioLegacy,
    /// compio on io_uring.
    Compio,
    /// Plain C: level-triggered epoll, non-blocking sockets.
    CEpoll,
    /// Not an echo server: the least a RESP server can do per request
    /// (c/resp_floor.c), which E7 measures beside redis-server at -P 1.
    CRespFloor,
    /// Not an echo server: the least a TCP proxy can do per message
    /// (c/relay_floor.c), which E9 measures beside haproxy; it needs an
    /// upstream ([`serve_relay_floor`]).
    CRelayFloor,
    /// The same floor on io_uring (uring_relay_floor.rs).
    UringRelayFloor,
    /// Not an echo server: the least a pub/sub server's fan-out can do
    /// (c/pubsub_floor.c), which E7's pub/sub cells measure beside
    /// redis-server.
    CPubsubFloor,
    /// Not an echo server: the least an HTTP/1.1 server can do per
    /// request (c/http_floor.c), which E6 measures beside nginx at depth 1.
    CHttpFloor,
}

impl Peer {
    /// The echo servers.
    pub const ALL: [Peer; 5] = [Peer::Tokio, Peer::MonoioUring, Peer::MonoioLegacy, Peer::Compio, Peer::CEpoll];
    /// Every server `iomux peer` runs: the echo servers and the floors.
    pub const NAMED: [Peer; 10] = [
        Peer::Tokio,
        Peer::MonoioUring,
        Peer::MonoioLegacy,
        Peer::Compio,
        Peer::CEpoll,
        Peer::CRespFloor,
        Peer::CRelayFloor,
        Peer::UringRelayFloor,
        Peer::CPubsubFloor,
        Peer::CHttpFloor,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Peer::Tokio => "tokio",
            Peer::MonoioUring => "monoio-uring",
            Peer::MonoioLegacy => "monoio-legacy",
            Peer::Compio => "compio",
            Peer::CEpoll => "c-epoll",
            Peer::CRespFloor => "c-resp-floor",
            Peer::CRelayFloor => "c-relay-floor",
            Peer::UringRelayFloor => "uring-relay-floor",
            Peer::CPubsubFloor => "c-pubsub-floor",
            Peer::CHttpFloor => "c-http-floor",
        }
    }

    /// Whether this is a relay floor, which needs an upstream.
    pub fn relays(self) -> bool {
        matches!(self, Peer::CRelayFloor | Peer::UringRelayFloor)
    }

    /// Serves (echo, or a RESP, pub/sub or HTTP floor) on `listener` (bound and listening) on this thread until
    /// the process ends; returns only on an error that stops the server.
    /// Calls `ready` once the runtime is up and the listener is registered
    /// with it, just before the first accept: a
    /// server that cannot start fails before `ready`, and a client may
    /// connect as soon as it is called. An error from `ready` stops the
    /// server and is returned.
    pub fn serve_ready(self, listener: TcpListener, ready: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        match self {
            Peer::Tokio => tokio_echo::serve(listener, ready),
            Peer::MonoioUring => monoio_echo::serve_uring(listener, ready),
            Peer::MonoioLegacy => monoio_echo::serve_legacy(listener, ready),
            Peer::Compio => compio_echo::serve(listener, ready),
            Peer::CEpoll => c_epoll::serve(listener, ready),
            Peer::CRespFloor => c_epoll::serve_resp_floor(listener, ready),
            Peer::CPubsubFloor => c_epoll::serve_pubsub_floor(listener, ready),
            Peer::CHttpFloor => c_epoll::serve_http_floor(listener, ready),
            Peer::CRelayFloor | Peer::UringRelayFloor => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{self} relays to an upstream: serve_relay_floor"),
            )),
        }
    }
}

/// A relay floor (c/relay_floor.c, or uring_relay_floor.rs) on
/// `listener`, each connection relayed to its own connection to
/// `upstream`, as [`Peer::serve_ready`].
pub fn serve_relay_floor(
    peer: Peer,
    listener: TcpListener,
    upstream: std::net::SocketAddrV4,
    ready: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    match peer {
        Peer::UringRelayFloor => uring_relay_floor::serve(listener, upstream, ready),
        Peer::CRelayFloor => c_epoll::serve_relay_floor(listener, upstream, ready),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{peer} is not a relay floor"))),
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no peer's; its message lists the valid names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPeer(pub String);

impl fmt::Display for UnknownPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Peer::NAMED.iter().map(|p| p.name()).collect();
        write!(f, "unknown peer server {:?} (valid: {})", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownPeer {}

impl FromStr for Peer {
    type Err = UnknownPeer;

    fn from_str(s: &str) -> Result<Peer, UnknownPeer> {
        Peer::NAMED.into_iter().find(|p| p.name() == s).ok_or_else(|| UnknownPeer(s.to_string()))
    }
}

/// Prefixes an error with the call that failed, keeping its kind.
fn context(what: &'static str) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// An accept's outcome for the accept loop: a connection to serve, none
/// (the attempt failed for that connection alone), or the error that
/// stops the server.
fn accepted<S, A>(result: io::Result<(S, A)>) -> io::Result<Option<S>> {
    match result {
        Ok((stream, _)) => Ok(Some(stream)),
        Err(e) if accept_error_is_transient(&e) => Ok(None),
        Err(e) => Err(context("accept")(e)),
    }
}

/// Whether a failed accept concerned only that one connection (it was
/// reset or aborted before it was accepted), so the server goes on.
/// Anything else (descriptors or memory exhausted) stops the server with
/// the error, as the runtimes' examples do, rather than spin on it.
fn accept_error_is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::Interrupted)
        || e.raw_os_error() == Some(libc::EPROTO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for p in Peer::NAMED {
            assert_eq!(p.name().parse::<Peer>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
        }
    }

    #[test]
    fn an_unknown_name_lists_the_valid_ones() {
        let e = "nginx".parse::<Peer>().unwrap_err().to_string();
        assert!(e.contains("\"nginx\""), "{e}");
        assert!(
            e.contains(
                "tokio, monoio-uring, monoio-legacy, compio, c-epoll, c-resp-floor, c-relay-floor, uring-relay-floor, c-pubsub-floor, c-http-floor"
            ),
            "{e}"
        );
    }

    #[test]
    fn resets_are_transient_and_exhaustion_is_not() {
        assert!(accept_error_is_transient(&io::Error::from(io::ErrorKind::ConnectionAborted)));
        assert!(accept_error_is_transient(&io::Error::from_raw_os_error(libc::EPROTO)));
        assert!(!accept_error_is_transient(&io::Error::from_raw_os_error(libc::EMFILE)));
    }
}
