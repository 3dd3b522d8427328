//! A burst of 10,000 connects, issued as fast as one thread can, is
//! accepted on every backend without one listen-queue overflow (the
//! kernel's system-wide TcpExtListenOverflows counter does not move).
//!
//! Its own test binary: cargo runs test binaries one after the other, so no
//! other test of this suite bursts at the same time; the backends take
//! turns through `heavy()`.

mod support;

use rustix::net::{AddressFamily, SocketFlags, SocketType};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::*;

const BURST: usize = 10_000;

/// TcpExt's ListenOverflows from /proc/net/netstat (a names line, then a
/// values line).
fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").expect("read /proc/net/netstat");
    let mut tcp_ext = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (tcp_ext.next().expect("TcpExt names"), tcp_ext.next().expect("TcpExt values"));
    let at = names.split_whitespace().position(|n| n == "ListenOverflows").expect("ListenOverflows in TcpExt");
    values.split_whitespace().nth(at).and_then(|v| v.parse().ok()).expect("a ListenOverflows value")
}

fn burst_accepted_without_overflow(backend: &str) {
    let _turn = heavy();
    raise_fd_limit();
    let server = Serve::start(backend, &[]);
    let before = listen_overflows();
    // Every connect first, non-blocking, before any is used: the listen
    // queue gets them as fast as this thread can issue them.
    let sockets: Vec<TcpStream> = (0..BURST)
        .map(|i| {
            let fd = rustix::net::socket_with(AddressFamily::INET, SocketType::STREAM, SocketFlags::NONBLOCK, None)
                .expect("socket");
            match rustix::net::connect(&fd, &server.addr) {
                Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
                Err(e) => panic!("{backend}: connect {i} of the burst: {e}"),
            }
            TcpStream::from(fd)
        })
        .collect();
    let mut echoed = 0u64;
    for (i, mut s) in sockets.into_iter().enumerate() {
        // Blocking from here: a write waits for the handshake to finish.
        s.set_nonblocking(false).expect("blocking");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let byte = [i as u8];
        let mut back = [0u8];
        match s.write_all(&byte).and_then(|_| s.read_exact(&mut back)) {
            Ok(()) => {
                assert_eq!(back, byte, "{backend}: connection {i} echoed another byte");
                echoed += 1;
            }
            // select refuses descriptors from FD_SETSIZE (1024) on: those
            // are accepted, then closed at once.
            Err(e) if backend == "select" && i >= 1000 => {
                assert!(
                    matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
                    "{backend}: connection {i}: {e}"
                );
            }
            Err(e) => panic!("{backend}: connection {i}: {e}"),
        }
    }
    let overflows = listen_overflows() - before;
    let (stats, _) = server.stop();
    assert_eq!(stats["accepted"], echoed, "{backend}: {stats}");
    let refused = stats["refused"].as_u64().expect("refused in stats");
    assert_eq!(echoed + refused, BURST as u64, "{backend}: every connect accepted, served or refused: {stats}");
    assert_eq!(overflows, 0, "{backend}: {overflows} listen-queue overflows during a burst of {BURST} connects");
}

on_every_backend!(burst_accepted_without_overflow);
