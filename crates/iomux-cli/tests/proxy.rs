//! `iomux serve --proto proxy`, as a client and an upstream see it, on
//! every backend, to a TCP and to a Unix socket upstream:
//! - half-close: a client that sends 1 MiB and shuts its write side down
//!   gets the upstream's whole reply (`nc -N`'s case);
//! - integrity and memory: 64 MiB through the proxy to an echo upstream,
//!   read slowly, come back intact with the proxy under 32 MiB of RSS,
//!   spliced (`--splice auto`, the default) and copied (`--splice off`);
//! - faults: an upstream down, resetting, or silent (its SYNs dropped)
//!   closes each client within 100 ms or the connect timeout, and the
//!   proxy goes on serving;
//! - redis-benchmark through the proxy to redis-server: no errors
//!   (skipped without redis, except under CI=true).

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use support::*;

on_every_backend! {
    half_close_reaches_the_upstream_and_back,
    half_close_to_a_unix_upstream,
    sixty_four_mib_to_a_slow_reader_in_bounded_memory,
    sixty_four_mib_through_a_unix_upstream,
    an_upstream_that_is_down_closes_its_clients_at_once,
    an_upstream_that_resets_resets_its_client,
    a_silent_upstream_closes_its_clients_at_the_connect_timeout,
    redis_benchmark_through_the_proxy_has_no_errors,
}

/// The proxy on `backend` to `upstream` (`host:port` or `unix:PATH`).
fn proxy(backend: &str, upstream: &str, extra: &[&str]) -> Serve {
    let mut args = vec!["--proto", "proxy", "--upstream", upstream];
    args.extend_from_slice(extra);
    Serve::start(backend, &args)
}

/// A byte pattern that shows loss, duplication and reordering.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    Rng::new(seed).bytes(len)
}

/// A folder of its own for a Unix socket, removed on drop.
struct SockDir(PathBuf);

impl SockDir {
    fn new(name: &str) -> SockDir {
        let dir = std::env::temp_dir().join(format!("iomux-proxy-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        SockDir(dir)
    }
    fn sock(&self) -> PathBuf {
        self.0.join("up.sock")
    }
    fn arg(&self) -> String {
        format!("unix:{}", self.sock().display())
    }
}

impl Drop for SockDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reads `s` to its end, then answers `reply` and closes: an upstream
/// that needs the whole request first. Returns what it read.
fn read_all_then_answer(mut s: impl Read + Write, reply: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    s.read_to_end(&mut got).expect("the upstream reads to the end");
    s.write_all(reply).expect("the upstream's reply");
    got
}

/// The client's side of the half-close case through `proxy`.
fn client_half_closes(proxy: &Serve, backend: &str) -> Vec<u8> {
    let mut c = proxy.connect();
    let request = pattern(1, 1 << 20);
    let mut w = c.try_clone().unwrap();
    let writer = thread::spawn(move || {
        w.write_all(&request).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap_or_else(|e| panic!("{backend}: the reply: {e}"));
    writer.join().unwrap();
    got
}

fn half_close_reaches_the_upstream_and_back(backend: &str) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap().to_string();
    let up = thread::spawn(move || read_all_then_answer(upstream.accept().unwrap().0, &pattern(2, 1 << 20)));
    let p = proxy(backend, &target, &[]);
    let got = client_half_closes(&p, backend);
    assert!(got == pattern(2, 1 << 20), "{backend}: the reply came back altered ({} bytes)", got.len());
    assert!(up.join().unwrap() == pattern(1, 1 << 20), "{backend}: the upstream got the request altered");
    let (stats, _) = p.stop();
    assert_eq!(stats["proxy"]["relayed"], 1, "{backend}: {stats}");
    assert_eq!(stats["closed_abnormally"], 0, "{backend}: {stats}");
}

fn half_close_to_a_unix_upstream(backend: &str) {
    let dir = SockDir::new(&format!("half-{backend}"));
    let upstream = UnixListener::bind(dir.sock()).unwrap();
    let up = thread::spawn(move || read_all_then_answer(upstream.accept().unwrap().0, &pattern(2, 1 << 20)));
    let p = proxy(backend, &dir.arg(), &[]);
    let got = client_half_closes(&p, backend);
    assert!(got == pattern(2, 1 << 20), "{backend}: the reply came back altered ({} bytes)", got.len());
    assert!(up.join().unwrap() == pattern(1, 1 << 20), "{backend}: the upstream got the request altered");
    p.stop();
}

/// Echoes one connection until its end of input.
fn echo_once(mut s: impl Read + Write) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => s.write_all(&buf[..n]).expect("the upstream's echo"),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("the upstream's read: {e}"),
        }
    }
}

const BULK: usize = 64 << 20;

/// 64 MiB written as fast as the proxy takes them, read back 64 KiB per
/// millisecond at most: intact, with the proxy's RSS (sampled every 20
/// ms) under 32 MiB.
fn slow_reader_through(p: &Serve, backend: &str) {
    let mut c = p.connect();
    let data = Arc::new(pattern(3, BULK));
    let (mut w, sent) = (c.try_clone().unwrap(), data.clone());
    let writer = thread::spawn(move || {
        w.write_all(&sent).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let rss = PeakRss::start(p.pid());
    let mut got = Vec::with_capacity(BULK);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = c.read(&mut buf).unwrap_or_else(|e| panic!("{backend}: after {} bytes: {e}", got.len()));
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        thread::sleep(Duration::from_millis(1));
    }
    let peak = rss.stop();
    writer.join().unwrap();
    assert_eq!(got.len(), BULK, "{backend}: bytes back");
    assert!(got == *data, "{backend}: the echo came back altered");
    assert!(peak < 32 << 20, "{backend}: the proxy's RSS reached {} KiB", peak >> 10);
    eprintln!("{backend}: the proxy's RSS peaked at {} KiB", peak >> 10);
}

/// Spliced (`--splice auto`): bounded by the pipes as copying is by
/// --proxy-buffer.
fn sixty_four_mib_to_a_slow_reader_in_bounded_memory(backend: &str) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap().to_string();
    let up = thread::spawn(move || echo_once(upstream.accept().unwrap().0));
    let p = proxy(backend, &target, &[]);
    slow_reader_through(&p, backend);
    up.join().unwrap();
    let (stats, _) = p.stop();
    assert!(stats["peak_output_bytes"].as_u64().unwrap() <= (256 + 64) << 10, "{backend}: {stats}");
    // Both directions from their first full read: most of the 128 MiB.
    assert!(stats["spliced_bytes"].as_u64().unwrap() >= BULK as u64, "{backend}: {stats}");
}

/// The same through a Unix socket upstream, copied (`--splice off`): the
/// path every byte took before splicing, still bounded.
fn sixty_four_mib_through_a_unix_upstream(backend: &str) {
    let dir = SockDir::new(&format!("bulk-{backend}"));
    let upstream = UnixListener::bind(dir.sock()).unwrap();
    let up = thread::spawn(move || echo_once(upstream.accept().unwrap().0));
    let p = proxy(backend, &dir.arg(), &["--splice", "off"]);
    slow_reader_through(&p, backend);
    up.join().unwrap();
    let (stats, _) = p.stop();
    assert_eq!(stats["spliced_bytes"].as_u64(), Some(0), "{backend}: {stats}");
}

/// How a client's wait for the proxy's answer ended, and how long it took.
fn closed_within(p: &Serve) -> (Result<usize, ErrorKind>, Duration) {
    let mut c = p.connect();
    let started = Instant::now();
    let _ = c.write_all(b"hello\n");
    let mut buf = [0u8; 64];
    let end = c.read(&mut buf).map_err(|e| e.kind());
    (end, started.elapsed())
}

/// Nothing listens upstream: each of 10 clients is closed (EOF) within
/// 100 ms; once the upstream is up, the next client is served.
fn an_upstream_that_is_down_closes_its_clients_at_once(backend: &str) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let p = proxy(backend, &port.to_string(), &[]);
    for _ in 0..10 {
        let (end, took) = closed_within(&p);
        assert_eq!(end, Ok(0), "{backend}: the client's end");
        assert!(took < Duration::from_millis(100), "{backend}: closed after {took:?}");
    }
    let upstream = TcpListener::bind(port).expect("the upstream's port again");
    let up = thread::spawn(move || echo_once(upstream.accept().unwrap().0));
    let mut c = p.connect();
    round_trip(&mut c, b"served now");
    drop(c);
    up.join().unwrap();
    let (stats, stderr) = p.stop();
    assert_eq!(stats["proxy"]["upstream_failed"], 10, "{backend}: {stats}");
    assert!(stderr.contains("Connection refused"), "{backend}: the reason is said: {stderr}");
}

/// The upstream resets each connection as soon as it has it: the client
/// is reset (or sees its end) within 100 ms, counted as an upstream reset.
fn an_upstream_that_resets_resets_its_client(backend: &str) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap().to_string();
    let up = thread::spawn(move || {
        for _ in 0..5 {
            let (s, _) = upstream.accept().unwrap();
            let mut b = [0u8; 6];
            let _ = (&s).read_exact(&mut b); // the client's hello, relayed
            rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
        }
    });
    let p = proxy(backend, &target, &[]);
    for _ in 0..5 {
        let (end, took) = closed_within(&p);
        assert!(matches!(end, Err(ErrorKind::ConnectionReset)), "{backend}: {end:?}");
        assert!(took < Duration::from_millis(100), "{backend}: reset after {took:?}");
    }
    up.join().unwrap();
    let (stats, _) = p.stop();
    assert_eq!(stats["proxy"]["upstream_resets"], 5, "{backend}: {stats}");
}

/// An upstream whose SYNs are dropped (its accept queue is full, so the
/// kernel drops them, as a firewall's DROP would): each client is closed
/// at the 300 ms connect timeout, not before and not long after.
fn a_silent_upstream_closes_its_clients_at_the_connect_timeout(backend: &str) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    rustix::net::listen(&upstream, 0).expect("a backlog of 0");
    let target = upstream.local_addr().unwrap();
    let _held = TcpStream::connect(target).unwrap(); // the one place in the queue
    let p = proxy(backend, &target.to_string(), &["--connect-timeout", "0.3"]);
    for _ in 0..3 {
        let (end, took) = closed_within(&p);
        assert_eq!(end, Ok(0), "{backend}: the client's end");
        assert!(took >= Duration::from_millis(290) && took < Duration::from_millis(400), "{backend}: {took:?}");
    }
    let (stats, _) = p.stop();
    assert_eq!(stats["proxy"]["upstream_timeouts"], 3, "{backend}: {stats}");
}

/// redis-benchmark's SET, GET, LPUSH and LRANGE_100, one at a time and
/// 16 pipelined, through the proxy to redis-server: every request
/// answered, none an error.
fn redis_benchmark_through_the_proxy_has_no_errors(backend: &str) {
    let Some(redis) = Redis::start() else { return };
    if Command::new("redis-benchmark").arg("--version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "CI=true but redis-benchmark is missing (scripts/install-http-tools)");
        eprintln!("skipped: no redis-benchmark (scripts/install-http-tools installs it)");
        return;
    }
    let p = proxy(backend, &redis.addr.to_string(), &[]);
    let port = p.addr.port().to_string();
    for pipeline in ["1", "16"] {
        let out = Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &port, "-n", "4000", "-c", "20", "-P", pipeline])
            .args(["-t", "set,get,lpush,lrange_100", "--csv"])
            .output()
            .expect("run redis-benchmark");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{backend} -P {pipeline}: {text}");
        let rows = text
            .lines()
            .filter(|l| {
                l.starts_with("\"SET\"")
                    || l.starts_with("\"GET\"")
                    || l.starts_with("\"LPUSH\"")
                    || l.starts_with("\"LRANGE_100")
            })
            .count();
        assert_eq!(rows, 4, "{backend} -P {pipeline}: every test measured: {text}");
        assert!(!text.to_lowercase().contains("error"), "{backend} -P {pipeline}: {text}");
    }
    let (stats, _) = p.stop();
    assert_eq!(stats["proxy"]["errors"], 0, "{backend}: {stats}");
    assert_eq!(stats["proxy"]["upstream_failed"], 0, "{backend}: {stats}");
}

#[test]
fn bad_proxy_flags_are_refused_before_serving() {
    let refused = |args: &[&str]| {
        let out = iomux().arg("serve").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(refused(&["--proto", "proxy"]).contains("--upstream"));
    assert!(refused(&["--proto", "echo", "--upstream", "127.0.0.1:1"]).contains("--upstream is for --proto proxy"));
    assert!(refused(&["--proto", "proxy", "--upstream", "unix:"]).contains("path"));
    assert!(refused(&["--proto", "proxy", "--upstream", "nowhere"]).contains("host:port or unix:PATH"));
    let big = refused(&["--proto", "proxy", "--upstream", "127.0.0.1:1", "--proxy-buffer", "8388608"]);
    assert!(big.contains("--max-output"), "{big}");
    assert!(refused(&["--proto", "proxy", "--upstream", "127.0.0.1:1", "--connect-timeout", "0"])
        .contains("--connect-timeout"));
}
