//! The peers' echo servers (`iomux peer`, hidden), from a separate
//! process as the lab runs them: the banner, bytes echoed intact on many
//! connections at once, a 4 MiB stream that the server cannot send back
//! as fast as it reads it, and TCP_NODELAY on every connection it accepts.
//! And the C floor of a RESP server (E7's) and of an HTTP server (E6's):
//! their canned replies, requests split across reads included; and the C
//! floor of a relay (E9's): bytes relayed both ways, ends passed on.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use support::{iomux, Rng};

/// `on_every_peer! { f, g }`: a module per function, with one `#[test]`
/// per peer calling `f("tokio")`, ...
macro_rules! on_every_peer {
    ($($test:ident),+ $(,)?) => {$(
        mod $test {
            #[test] fn tokio() { super::$test("tokio") }
            #[test] fn monoio_uring() { super::$test("monoio-uring") }
            #[test] fn monoio_legacy() { super::$test("monoio-legacy") }
            #[test] fn compio() { super::$test("compio") }
            #[test] fn c_epoll() { super::$test("c-epoll") }
        }
    )+};
}

on_every_peer! { fifty_connections_echo_their_own_bytes, four_mib_echo_while_reading, accepted_sockets_have_nodelay }

const TIMEOUT: Duration = Duration::from_secs(20);

/// A running `iomux peer`, killed when dropped (a failed test too).
struct Peer {
    child: Child,
    addr: SocketAddr,
}

impl Peer {
    fn start(name: &str) -> Peer {
        Peer::start_with(name, &[])
    }

    fn start_with(name: &str, flags: &[&str]) -> Peer {
        let child = iomux()
            .args(["peer", "--server", name, "--listen", "127.0.0.1:0"])
            .args(flags)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn iomux peer");
        // Guarded from here on: a bad or missing banner still kills it.
        let mut peer = Peer { child, addr: SocketAddr::from(([0, 0, 0, 0], 0)) };
        let stdout = peer.child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = tx.send(BufReader::new(stdout).read_line(&mut line).map(|_| line));
        });
        let line = rx.recv_timeout(TIMEOUT).expect("no banner in time").expect("read banner");
        let prefix = format!("iomux peer: {name} listening on ");
        let suffix = format!(" (pid {})\n", peer.child.id());
        let addr = line
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(&suffix))
            .unwrap_or_else(|| panic!("{name}: banner {line:?} is not {prefix}ADDR{suffix:?}"));
        peer.addr = addr.parse().unwrap_or_else(|e| panic!("{name}: address {addr:?} in banner: {e}"));
        assert_ne!(peer.addr.port(), 0, "{name}: port 0 not resolved in the banner");
        peer
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
        s.set_write_timeout(Some(TIMEOUT)).expect("write timeout");
        s
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts `got == want`, naming the first byte that differs.
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!("{what}: byte {at} is {} instead of {}", got[at], want[at]);
    }
}

/// 50 connections open at once; in each round every connection sends a
/// message (1 B to 4 KiB, bytes drawn from the connection's own seed)
/// before any echo is read, so the server holds them all together. At
/// the end each half-closes and the server must close it in turn.
fn fifty_connections_echo_their_own_bytes(name: &str) {
    let peer = Peer::start(name);
    let mut conns: Vec<(TcpStream, Rng)> = (0..50).map(|i| (peer.connect(), Rng::new(i + 1))).collect();
    for round in 0..5 {
        let sent: Vec<Vec<u8>> = conns
            .iter_mut()
            .map(|(s, rng)| {
                let n = if round == 0 { 1 } else { rng.size(4096) };
                let msg = rng.bytes(n);
                s.write_all(&msg).expect("send");
                msg
            })
            .collect();
        for (i, ((s, _), want)) in conns.iter_mut().zip(&sent).enumerate() {
            let mut got = vec![0u8; want.len()];
            s.read_exact(&mut got).unwrap_or_else(|e| panic!("{name}: connection {i}, round {round}: {e}"));
            assert_same(&got, want, &format!("{name}: connection {i}, round {round}"));
        }
    }
    for (i, (s, _)) in conns.iter_mut().enumerate() {
        s.shutdown(Shutdown::Write).expect("shutdown");
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap_or_else(|e| panic!("{name}: connection {i}: waiting for close: {e}"));
        assert!(rest.is_empty(), "{name}: connection {i}: {} unexpected bytes before close", rest.len());
    }
}

/// One connection sends 4 MiB while another thread reads, starting late:
/// the socket buffers fill, the server's writes come up short and it must
/// hold the rest (the C server's EPOLLOUT path) without losing a byte.
fn four_mib_echo_while_reading(name: &str) {
    let peer = Peer::start(name);
    let mut reader = peer.connect();
    let mut writer = reader.try_clone().expect("clone");
    let data = Rng::new(7).bytes(4 << 20);
    let sent = data.clone();
    let sender = std::thread::spawn(move || {
        writer.write_all(&sent)?;
        writer.shutdown(Shutdown::Write)
    });
    // Late, so that the echo backs up into the server first.
    std::thread::sleep(Duration::from_millis(200));
    let mut got = Vec::with_capacity(data.len());
    reader.read_to_end(&mut got).unwrap_or_else(|e| panic!("{name}: reading the echo: {e}"));
    sender.join().expect("sender thread").unwrap_or_else(|e| panic!("{name}: sending: {e}"));
    assert_same(&got, &data, &format!("{name}: 4 MiB echo"));
}

/// `iomux peer` sets TCP_NODELAY on its listener only, as `iomux serve`
/// does; the connections it accepts (by accept4, or through io_uring)
/// must have inherited it. Read in the server's own process: each of its
/// sockets on the server's port, taken with pidfd_getfd, asked with
/// getsockopt.
fn accepted_sockets_have_nodelay(name: &str) {
    use rustix::io::Errno;
    use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
    let peer = Peer::start(name);
    let mut conns: Vec<TcpStream> = (0..2).map(|_| peer.connect()).collect();
    // An echo on each: the server has accepted both by then.
    for (i, s) in conns.iter_mut().enumerate() {
        s.write_all(b"x").expect("send");
        let mut got = [0u8; 1];
        s.read_exact(&mut got).unwrap_or_else(|e| panic!("{name}: connection {i}: {e}"));
    }
    let pid = Pid::from_raw(peer.child.id() as i32).expect("child pid");
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).expect("pidfd_open");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", peer.child.id())).expect("list the server's descriptors");
    let (mut listeners, mut accepted) = (0, 0);
    for entry in fds.map_while(Result::ok) {
        let Ok(target) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let is_socket = std::fs::read_link(entry.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        let fd = match pidfd_getfd(&pidfd, target, PidfdGetfdFlags::empty()) {
            Ok(fd) => fd,
            // Closed since it was listed.
            Err(Errno::BADF) => continue,
            // Not allowed or not there (a sandbox): nothing can be read.
            Err(e @ (Errno::PERM | Errno::NOSYS)) => {
                eprintln!("{name}: cannot take the server's descriptors here (pidfd_getfd: {e}); not checked");
                return;
            }
            Err(e) => panic!("{name}: pidfd_getfd of descriptor {target}: {e}"),
        };
        let socket = TcpStream::from(fd);
        // Only the server's own TCP sockets: on its port.
        if socket.local_addr().ok() != Some(peer.addr) {
            continue;
        }
        let nodelay = socket.nodelay().unwrap_or_else(|e| panic!("{name}: TCP_NODELAY of descriptor {target}: {e}"));
        let what = match socket.peer_addr() {
            Ok(from) => {
                accepted += 1;
                format!("the connection from {from}")
            }
            Err(_) => {
                listeners += 1;
                "the listener".to_string()
            }
        };
        assert!(nodelay, "{name}: {what} (descriptor {target}) has Nagle on");
    }
    assert_eq!((listeners, accepted), (1, 2), "{name}: the listener and both connections, all with TCP_NODELAY");
}

/// The C floor answers each whole request of a read with its canned reply,
/// by the command's first letter, and skips the arguments by their
/// lengths (an argument that looks like a request is not one). A request
/// split across reads, as a pipelined batch can be, is answered once
/// whole; one that is not RESP closes its connection, not the server.
#[test]
fn the_resp_floor_answers_each_request_of_a_read() {
    let peer = Peer::start("c-resp-floor");
    let mut s = peer.connect();
    s.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    let requests = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$9\r\n*1\r\n$1\r\nx\r\n\
                     *2\r\n$3\r\nget\r\n$1\r\nk\r\n\
                     *2\r\n$4\r\nINCR\r\n$1\r\nn\r\n\
                     *3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$4\r\nsave\r\n";
    s.write_all(requests).expect("send");
    let want = b"+OK\r\n$3\r\nxxx\r\n:1\r\n*0\r\n";
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).expect("the four replies");
    assert_same(&got, want, "c-resp-floor");
    // A GET cut inside its key's length, then inside its key: one reply,
    // once the last part has come, and none before.
    s.set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    for part in [&b"*2\r\n$3\r\nGET\r\n$1"[..], b"6\r\nkey:0000"] {
        s.write_all(part).expect("send a part");
        let mut early = [0; 1];
        assert!(s.read(&mut early).is_err(), "c-resp-floor replied to part of a request");
    }
    s.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    s.write_all(b"00000012\r\n").expect("send the last part");
    let mut reply = [0; 9];
    s.read_exact(&mut reply).expect("GET's canned reply");
    assert_same(&reply, b"$3\r\nxxx\r\n", "c-resp-floor, a request in three reads");
    // A length of 20 digits is not RESP: the floor closes that connection.
    s.write_all(b"*2\r\n$3\r\nGET\r\n$99999999999999999999\r\nk\r\n").expect("send");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("the floor closes the connection");
    assert_same(&rest, b"", "c-resp-floor, after a request that is not RESP");
    let mut again = peer.connect();
    again.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    again.write_all(b"*1\r\n$4\r\nINCR\r\n").expect("send");
    let mut reply = [0; 4];
    again.read_exact(&mut reply).expect("a reply after the bad length");
    assert_same(&reply, b":1\r\n", "c-resp-floor, still serving");
}

/// The HTTP floor answers each request's end of head with iomux's
/// plaintext response, as long as iomux's: pipelined ones in one read,
/// and one whose end of head is split across reads once it is whole.
#[test]
fn the_http_floor_answers_each_request_once_its_head_ends() {
    let request = b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n";
    // iomux's own response, to compare the floor's with.
    let iomux = support::Serve::start("epoll", &["--proto", "http"]);
    let mut s = iomux.connect();
    s.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    s.write_all(request).expect("send to iomux");
    let mut theirs = vec![0; 4096];
    let n = s.read(&mut theirs).expect("iomux's response");
    theirs.truncate(n);
    assert!(theirs.ends_with(b"\r\n\r\nHello, World!"), "{:?}", String::from_utf8_lossy(&theirs));
    drop(s);
    iomux.stop();
    let date = |r: &[u8]| r.windows(6).position(|w| w == b"Date: ").map(|at| at + 6);
    let peer = Peer::start("c-http-floor");
    let mut s = peer.connect();
    s.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
    s.write_all(&request.repeat(3)).expect("send three pipelined requests");
    let mut got = vec![0; 3 * theirs.len()];
    s.read_exact(&mut got).expect("three responses");
    for response in got.chunks(theirs.len()) {
        // The same bytes but the date's, which is as long.
        let (at, theirs_at) = (date(response), date(&theirs));
        assert!(at.is_some() && at == theirs_at, "{:?}", String::from_utf8_lossy(response));
        let at = at.unwrap_or(0);
        assert_same(&response[..at], &theirs[..at], "c-http-floor's head");
        assert_same(&response[at + 29..], &theirs[at + 29..], "c-http-floor's end");
    }
    // The end of head cut after "\r\n\r": one response, once "\n" comes.
    for part in [&request[..request.len() - 1], b"\n"] {
        s.write_all(part).expect("send a part");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut response = vec![0; theirs.len()];
    s.read_exact(&mut response).expect("the split request's response");
    assert_same(&response[..20], &theirs[..20], "c-http-floor, the split request");
    s.set_read_timeout(Some(Duration::from_millis(200))).expect("read timeout");
    let mut more = [0; 1];
    assert!(s.read(&mut more).is_err(), "no response beyond one per request");
}

/// The relay floor passes each connection's bytes to its own upstream
/// connection and back, and a client's close to the upstream; without
/// --upstream it refuses to start.
#[test]
fn the_relay_floor_relays_both_ways() {
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let target = upstream.local_addr().expect("addr").to_string();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = upstream.accept().expect("the floor's connection");
        let mut buf = [0u8; 4096];
        let mut total = 0;
        loop {
            match s.read(&mut buf).expect("read") {
                0 => return total,
                n => {
                    s.write_all(&buf[..n]).expect("echo");
                    total += n;
                }
            }
        }
    });
    let peer = Peer::start_with("c-relay-floor", &["--upstream", &target]);
    let mut s = peer.connect();
    for round in 0..20u8 {
        let msg = vec![round; 100 + usize::from(round)];
        s.write_all(&msg).expect("send");
        let mut back = vec![0; msg.len()];
        s.read_exact(&mut back).expect("the echo through the floor");
        assert_same(&back, &msg, "c-relay-floor");
    }
    drop(s);
    assert_eq!(echo.join().expect("upstream"), (0..20).map(|r| 100 + r).sum::<usize>(), "closed after all of it");
    let out = iomux().args(["peer", "--server", "c-relay-floor", "--listen", "127.0.0.1:0"]).output().expect("run");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--upstream"));
}
