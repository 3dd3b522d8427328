//! `iomux serve --proto proxy --upstream ADDR`: a TCP proxy, as haproxy's
//! tcp mode, on iomux's public API alone. Each accepted connection opens
//! its own upstream connection (TCP or a Unix socket) and the two relay
//! to each other:
//! - each direction half-closes on its own: one side's end of input is
//!   passed on as the other's, after what is queued for it;
//! - each direction is bounded: a sender is paused while its partner holds
//!   more than the proxy buffer unsent, and resumed at half of it, so a
//!   slow reader on one side holds back the writer on the other;
//! - an upstream that refuses, times out or resets ends its client at once
//!   (a reset as a reset), and every close is counted by its reason;
//! - with `--splice`, a direction goes on by splice(2) (`Io::splice`), in
//!   the kernel, from its first full read (auto, as haproxy's
//!   `option splice-auto`) or its first byte (always).

use iomux::runtime::{CloseReason, ConnId, Handler, Io};
use iomux::Error;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Where the proxy connects to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Upstream {
    /// `host:port` (a name is resolved now, once) or `unix:PATH`.
    pub fn parse(s: &str) -> Result<Upstream, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs the socket's path, as in unix:/run/app.sock".into());
            }
            return Ok(Upstream::Unix(path.into()));
        }
        let mut addrs = s.to_socket_addrs().map_err(|e| format!("{s}: not host:port or unix:PATH ({e})"))?;
        addrs.next().map(Upstream::Tcp).ok_or_else(|| format!("{s}: the name has no address"))
    }

    /// As `parse` takes it back.
    pub fn to_arg(&self) -> String {
        match self {
            Upstream::Tcp(addr) => addr.to_string(),
            Upstream::Unix(path) => format!("unix:{}", path.display()),
        }
    }
}

/// How proxied connections ended, both loops' together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProxyCounts {
    /// Client connections accepted and given an upstream connection.
    pub relayed: u64,
    /// Upstream connects refused or failed.
    pub upstream_failed: u64,
    /// Upstream connects that took longer than --connect-timeout.
    pub upstream_timeouts: u64,
    /// Upstream connections reset (passed on to their clients as resets).
    pub upstream_resets: u64,
    /// Client connections reset (passed on to their upstreams).
    pub client_resets: u64,
    /// Either side closed by an error, the input limit or a vanished peer.
    pub errors: u64,
    /// Pairs closed for --idle-timeout.
    pub idle: u64,
}

impl ProxyCounts {
    pub fn add(&mut self, o: &ProxyCounts) {
        self.relayed += o.relayed;
        self.upstream_failed += o.upstream_failed;
        self.upstream_timeouts += o.upstream_timeouts;
        self.upstream_resets += o.upstream_resets;
        self.client_resets += o.client_resets;
        self.errors += o.errors;
        self.idle += o.idle;
    }
}

/// One side of a proxied pair.
pub struct Side {
    partner: ConnId,
    upstream: bool,
    /// Bytes both sides had spliced at this side's last idle check.
    spliced_seen: u64,
}

/// One loop's proxy.
pub struct ProxyServer {
    upstream: Upstream,
    /// Bytes a connection may hold unsent before its partner is paused.
    buffer: usize,
    idle_timeout: Option<Duration>,
    /// Splice a direction from its first read of at least this many bytes.
    splice_at: Option<usize>,
    pub counts: ProxyCounts,
    errors_reported: u32,
}

impl ProxyServer {
    pub fn new(upstream: Upstream, buffer: usize, idle_timeout: Option<Duration>) -> ProxyServer {
        ProxyServer {
            upstream,
            buffer,
            idle_timeout,
            splice_at: None,
            counts: ProxyCounts::default(),
            errors_reported: 0,
        }
    }

    /// Splices each direction from its first read of at least `at` bytes.
    pub fn splicing_from(mut self, at: Option<usize>) -> ProxyServer {
        self.splice_at = at;
        self
    }

    /// Traffic on a pair: both sides' idle deadlines move (free when later).
    fn active(&self, io: &mut Io<Side>, conn: ConnId, partner: ConnId) {
        if let Some(t) = self.idle_timeout {
            let at = io.now() + t;
            let _ = io.set_deadline(conn, at);
            let _ = io.set_deadline(partner, at);
        }
    }

    /// Says why the first upstream failures happened (then counts them only).
    fn report(&mut self, what: &str, reason: &CloseReason) {
        if self.errors_reported < 3 {
            eprintln!("iomux serve: {what}: {reason}");
        }
        self.errors_reported += 1;
    }
}

impl Handler for ProxyServer {
    type Conn = Side;
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<Side>, conn: ConnId) -> Side {
        self.counts.relayed += 1;
        let upstream = Side { partner: conn, upstream: true, spliced_seen: 0 };
        // A connect that fails, at once or later, comes to on_close.
        let partner = match &self.upstream {
            Upstream::Tcp(addr) => io.connect(*addr, None, upstream),
            Upstream::Unix(path) => io.connect_unix(path, upstream),
        };
        self.active(io, conn, partner);
        Side { partner, upstream: false, spliced_seen: 0 }
    }

    fn on_data(&mut self, io: &mut Io<Side>, conn: ConnId, side: &mut Side, data: &[u8]) -> usize {
        let to = side.partner;
        // To an upstream still connecting, it waits for the connect.
        if !io.write(to, data) {
            io.close(conn); // the partner is closing: nothing more to relay
        } else if io.buffered(to) > self.buffer {
            io.pause_reading(conn);
            io.notify_below(to, self.buffer / 2);
        }
        if self.splice_at.is_some_and(|at| data.len() >= at) {
            // Bulk: the rest of this direction goes in the kernel (false:
            // no pipe to be had, and it goes on here).
            let _ = io.splice(conn, to);
        }
        self.active(io, conn, to);
        data.len()
    }

    fn on_drained(&mut self, io: &mut Io<Side>, _conn: ConnId, side: &mut Side) {
        io.resume_reading(side.partner);
    }

    fn on_read_closed(&mut self, io: &mut Io<Side>, _conn: ConnId, side: &mut Side) {
        // This side's input ended, so does its partner's output, after what
        // is queued; the other direction goes on.
        io.shutdown_write(side.partner);
    }

    fn on_deadline(&mut self, io: &mut Io<Side>, conn: ConnId, side: &mut Side) {
        let spliced = io.spliced(conn) + io.spliced(side.partner);
        let moved = std::mem::replace(&mut side.spliced_seen, spliced) != spliced;
        if moved || io.buffered(conn) > 0 || io.buffered(side.partner) > 0 {
            // Spliced traffic (no on_data tells of it), or output still
            // queued: held back by a slow reader, not idle.
            self.active(io, conn, side.partner);
        } else {
            io.close_idle(conn);
        }
    }

    fn on_close(&mut self, io: &mut Io<Side>, _conn: ConnId, side: Side, reason: &CloseReason) {
        let c = &mut self.counts;
        match reason {
            // Both directions ended in order: the partner ends by itself.
            CloseReason::PeerClosed => return,
            CloseReason::Reset | CloseReason::Aborted => {
                // Aborted: ours, passing on the partner's reset (counted then).
                if matches!(reason, CloseReason::Reset) {
                    *if side.upstream { &mut c.upstream_resets } else { &mut c.client_resets } += 1;
                }
                // Passed on as what it was: the other side is reset too.
                return io.abort(side.partner);
            }
            CloseReason::ConnectFailed(_) => {
                c.upstream_failed += 1;
                self.report("upstream connect", reason);
            }
            CloseReason::ConnectTimeout => {
                c.upstream_timeouts += 1;
                self.report("upstream connect", reason);
            }
            CloseReason::Idle => c.idle += 1, // the partner then closes as Local
            CloseReason::Local | CloseReason::Shutdown | CloseReason::CloseTimeout => {}
            _ => c.errors += 1,
        }
        // Its partner closes too, after what is queued for it.
        io.close(side.partner);
    }

    fn on_refused(&mut self, error: &Error) {
        if self.errors_reported == 0 {
            eprintln!("iomux serve: refusing connections: {}", crate::chain(error));
        }
        self.errors_reported += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_parse_and_print_back() {
        for arg in ["127.0.0.1:6379", "[::1]:80", "unix:/run/app.sock"] {
            let up = Upstream::parse(arg).expect(arg);
            assert_eq!(up.to_arg(), arg);
        }
        assert_eq!(
            Upstream::parse("localhost:7").map(|u| u.to_arg()).ok().as_deref().map(|a| a.ends_with(":7")),
            Some(true)
        );
        assert!(Upstream::parse("unix:").unwrap_err().contains("path"));
        assert!(Upstream::parse("no-port").unwrap_err().contains("host:port or unix:PATH"));
    }
}
