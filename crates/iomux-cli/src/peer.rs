//! `iomux peer` (hidden): another runtime's echo server, or the C floor
//! of a RESP server (crate iomux-peers), started the way the lab starts `iomux serve`: pinned,
//! listening, a one-line banner, then serving until killed.

use crate::CliResult;
use anyhow::{bail, Context as _};
use iomux_peers::Peer;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct PeerArgs {
    /// tokio, monoio-uring, monoio-legacy, compio or c-epoll (echo),
    /// c-resp-floor (canned RESP replies: E7's floor), c-http-floor
    /// (canned HTTP responses: E6's floor), c-pubsub-floor
    /// (E7 pub/sub's fan-out floor), or c-relay-floor
    /// and uring-relay-floor (recv and send to --upstream alone, on epoll
    /// and on io_uring: E9's floors).
    #[arg(long, value_parser = parse_peer)]
    server: Peer,
    /// The relay floors: the IPv4 address each connection is relayed to.
    #[arg(long)]
    upstream: Option<std::net::SocketAddrV4>,
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long)]
    listen: SocketAddr,
    /// Pin the whole process (every thread it will start) to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

fn parse_peer(s: &str) -> Result<Peer, String> {
    s.parse().map_err(|e: iomux_peers::UnknownPeer| e.to_string())
}

/// A connection backlog deep enough for the lab's connection bursts
/// (the kernel caps it at net.core.somaxconn).
const BACKLOG: i32 = 4096;

pub fn run(args: PeerArgs) -> CliResult<ExitCode> {
    let peer = args.server;
    let upstream = match (peer, args.upstream) {
        (p, None) if p.relays() => bail!("{peer} needs --upstream IP:PORT"),
        (p, up) if p.relays() => up,
        (_, Some(_)) => bail!("--upstream is for the relay floors, not {peer}"),
        (_, None) => None,
    };
    // First, while this is the only thread: threads started later (the
    // runtime's, io_uring's io-wq workers) inherit the mask.
    if let Some(cpu) = args.cpu {
        crate::os::pin_to_cpu(cpu).with_context(|| format!("peer {peer}: pinning to CPU {cpu}"))?;
    }
    // As `iomux serve` does, so that neither side runs out of descriptors first.
    crate::os::raise_nofile_limit().with_context(|| format!("peer {peer}: raising RLIMIT_NOFILE"))?;
    let listener = listen(args.listen).with_context(|| format!("peer {peer}"))?;
    let addr = listener.local_addr().with_context(|| format!("peer {peer}: getsockname"))?;
    let banner = format!("iomux peer: {peer} listening on {addr} (pid {})", std::process::id());
    let ready = || {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{banner}")?;
        out.flush()
    };
    match upstream {
        Some(up) => iomux_peers::serve_relay_floor(peer, listener, up, ready),
        None => peer.serve_ready(listener, ready),
    }
    .with_context(|| format!("peer {peer}"))?;
    Ok(ExitCode::SUCCESS)
}

/// A blocking listening socket on `addr` with SO_REUSEADDR, TCP_NODELAY
/// and a deep backlog; each peer sets it up further as its runtime needs.
/// TCP_NODELAY as `iomux serve` sets it: on the listener, so that every
/// accepted connection inherits it (Linux clones the listener's setting),
/// whichever way the peer accepts (accept4, io_uring), and the C server
/// as well as the runtimes answers without Nagle's delay.
fn listen(addr: SocketAddr) -> CliResult<TcpListener> {
    use rustix::net::{bind, listen, socket_with, sockopt, AddressFamily, SocketFlags, SocketType};
    let family = if addr.is_ipv4() { AddressFamily::INET } else { AddressFamily::INET6 };
    let fd = socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None).context("socket")?;
    sockopt::set_socket_reuseaddr(&fd, true).context("SO_REUSEADDR")?;
    sockopt::set_tcp_nodelay(&fd, true).context("TCP_NODELAY")?;
    bind(&fd, &addr).with_context(|| format!("binding {addr}"))?;
    listen(&fd, BACKLOG).with_context(|| format!("listen on {addr}"))?;
    Ok(TcpListener::from(fd))
}
