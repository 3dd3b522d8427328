//! TCP proxy: `cargo run --release --example proxy -- LISTEN UPSTREAM [LOOPS]`,
//! UPSTREAM being `host:port` or `unix:PATH` (a Unix stream socket), e.g.
//! `proxy 127.0.0.1:7000 127.0.0.1:6379` in front of redis-server.
//! `IOMUX_BACKEND` picks the mechanism; Ctrl-C stops it.
//!
//! Each accepted connection opens its own upstream connection and the two
//! relay to each other, as haproxy's tcp mode does:
//! - each direction half-closes on its own: a client's end of input
//!   becomes the upstream's (`on_read_closed` -> `shutdown_write`), so a
//!   client that sends a request, shuts its side and waits (`nc -N`) gets
//!   the whole answer;
//! - what each side queues is bounded: a sender is paused while its
//!   partner holds more than `HIGH` bytes unsent, and resumed when that
//!   falls to `HIGH / 2` (`notify_below`), so a slow reader holds back the
//!   fast writer on the other side, not the other way round;
//! - an upstream that refuses, times out or resets ends its client at
//!   once (a reset is passed on as a reset), and every close is counted;
//! - with `IOMUX_SPLICE=BYTES`, a direction that brings a slice of at
//!   least BYTES goes on by splice(2) (`Io::splice`), in the kernel, as
//!   haproxy's `option splice-auto` does for bulk transfers.
use iomux::runtime::{CloseReason, Config, ConnId, Handler, Io, Runtime};
use iomux::Backend;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where the upstream is.
#[derive(Clone, Debug)]
pub enum Upstream {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix stream socket's path.
    Unix(PathBuf),
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Upstream::Tcp(addr) => write!(f, "{addr}"),
            Upstream::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl std::str::FromStr for Upstream {
    type Err = String;
    fn from_str(s: &str) -> Result<Upstream, String> {
        match s.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(Upstream::Unix(path.into())),
            Some(_) => Err("unix: needs a path, as in unix:/run/app.sock".into()),
            None => s.parse().map(Upstream::Tcp).map_err(|e| format!("{s}: not host:port or unix:PATH ({e})")),
        }
    }
}

/// Bytes a connection may hold unsent before its partner is paused.
pub const HIGH: usize = 256 << 10;

/// One loop's proxy.
pub struct Proxy {
    pub upstream: Upstream,
    /// Closes by reason, as `CloseReason`'s words.
    pub closes: Vec<String>,
    /// Splice a direction once it brings a slice this large (None: never).
    pub splice_at: Option<usize>,
}

impl Proxy {
    pub fn new(upstream: Upstream) -> Proxy {
        Proxy { upstream, closes: Vec::new(), splice_at: None }
    }
}

impl Handler for Proxy {
    /// The partner connection: an accepted one's upstream, and back.
    type Conn = ConnId;
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<ConnId>, conn: ConnId) -> ConnId {
        // Never fails here: a failed connect comes to on_close.
        match &self.upstream {
            Upstream::Tcp(addr) => io.connect(*addr, None, conn),
            Upstream::Unix(path) => io.connect_unix(path, conn),
        }
    }

    fn on_data(&mut self, io: &mut Io<ConnId>, conn: ConnId, to: &mut ConnId, data: &[u8]) -> usize {
        // Written while the upstream still connects, it waits for it.
        if !io.write(*to, data) {
            io.close(conn); // the partner is closing: nothing more to relay
        } else if io.buffered(*to) > HIGH {
            io.pause_reading(conn);
            io.notify_below(*to, HIGH / 2);
        }
        if self.splice_at.is_some_and(|at| data.len() >= at) {
            // Bulk: the rest of this direction goes in the kernel (false:
            // it could not, and goes on here).
            let _ = io.splice(conn, *to);
        }
        data.len()
    }

    fn on_drained(&mut self, io: &mut Io<ConnId>, _conn: ConnId, from: &mut ConnId) {
        io.resume_reading(*from);
    }

    fn on_read_closed(&mut self, io: &mut Io<ConnId>, _conn: ConnId, to: &mut ConnId) {
        // This side's input ended: so does the partner's, after what is
        // queued for it. The other direction goes on.
        io.shutdown_write(*to);
    }

    fn on_close(&mut self, io: &mut Io<ConnId>, _conn: ConnId, partner: ConnId, reason: &CloseReason) {
        self.closes.push(reason.to_string());
        match reason {
            // Both directions ended in order: so does the partner, by itself.
            CloseReason::PeerClosed => {}
            CloseReason::Reset | CloseReason::Aborted => io.abort(partner),
            _ => io.close(partner),
        }
    }
}

#[allow(dead_code)] // tests/relay.rs includes this file for `Proxy` alone
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: proxy LISTEN UPSTREAM [LOOPS] (UPSTREAM: host:port or unix:PATH)";
    let mut args = std::env::args().skip(1);
    let listen: SocketAddr = args.next().ok_or(usage)?.parse()?;
    let upstream: Upstream = args.next().ok_or(usage)?.parse()?;
    let loops = args.next().map_or(Ok(1), |n| n.parse())?;
    let backend = Backend::from_env()?;
    let splice_at = std::env::var("IOMUX_SPLICE").ok().map(|n| n.parse::<usize>()).transpose()?;
    let config = Config::builder().backend(backend).connect_timeout(Some(Duration::from_secs(5))).build()?;
    let runtime = Runtime::new(config, loops)?.bind(listen)?;
    let local = runtime.local_addr().unwrap_or(listen);
    let to = upstream.to_string();
    let runtime = runtime
        .stop_on_signals()
        .on_ready(move || println!("proxy: listening on {local} (backend {backend}), relaying to {to}"));
    let finished = runtime.run(move |_| Proxy { splice_at, ..Proxy::new(upstream.clone()) })?;
    println!("proxy: stopped after {} connections relayed", finished.stats.accepted);
    Ok(())
}
