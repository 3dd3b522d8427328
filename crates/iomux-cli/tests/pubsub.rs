//! Pub/sub in `iomux serve --proto resp --threads 2`, on every backend:
//! - its replies equal redis-server's byte for byte: (un)subscribe
//!   confirmations, message and pmessage pushes, counts, PUBSUB, PING and
//!   the errors of subscribed state (skipped without redis-server, except
//!   under CI=true);
//! - fan-out across loops: 50 subscribers, 5 publishers x 2,000 messages,
//!   every subscriber gets all 10,000, each publisher's in order;
//! - a subscriber that never reads is dropped at the hard limit while 20
//!   others get all of 200 MiB, the server's RSS grows by under 56 MiB;
//! - a burst of 1,000,000 publishes keeps each loop's inbox within its capacity and
//!   loses nothing;
//! - redis-cli SUBSCRIBE and PUBLISH work against it.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use support::*;

on_every_backend! {
    pubsub_replies_equal_redis_servers,
    a_subscriber_that_stops_reading_holds_nobody_back,
    every_subscriber_gets_every_message_in_order,
    a_subscriber_that_never_reads_is_dropped_at_the_hard_limit,
    a_burst_of_publishes_keeps_the_inboxes_bounded,
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    s
}

fn command(s: &mut TcpStream, line: &str, replies: usize) -> Vec<u8> {
    s.write_all(format!("{line}\r\n").as_bytes()).expect("write");
    read_replies(s, replies, line)
}

/// One connection's script: each command and how many replies it gets.
/// Every (un)subscribe-all leaves at most one name, so the order of the
/// replies does not depend on redis's hash order.
const ALONE: &[(&str, usize)] = &[
    ("UNSUBSCRIBE", 1),
    ("PUNSUBSCRIBE", 1),
    ("SUBSCRIBE a b", 2),
    ("SUBSCRIBE a", 1),
    ("PSUBSCRIBE h?llo", 1),
    ("GET k", 1),
    ("GET", 1),
    ("FOO bar", 1),
    ("PING", 1),
    ("PING x", 1),
    ("PUBLISH a m", 1),
    ("PUBSUB NUMSUB a", 1),
    ("UNSUBSCRIBE a zz", 2),
    ("PUNSUBSCRIBE h?llo", 1),
    ("UNSUBSCRIBE", 1),
    ("PING", 1),
    ("SUBSCRIBE", 1),
    ("PUBLISH a", 1),
    ("PUBSUB NUMSUB a b", 1),
    ("PUBSUB NUMPAT", 1),
    ("PUBSUB CHANNELS", 1),
    ("PUBSUB FOO", 1),
    ("PUBSUB", 1),
    ("PUBSUB NUMPAT x", 1),
    ("PUBSUB CHANNELS a b", 1),
    ("SUBSCRIBE q", 1),
    ("PUBSUB FOO", 1),
    ("PUBSUB CHANNELS", 1),
    ("PUBSUB NUMPAT x", 1),
    ("UNSUBSCRIBE", 1),
];

/// The replies a subscriber and a publisher see, on `addr`.
fn transcript(addr: SocketAddr) -> Vec<u8> {
    let mut out = Vec::new();
    let mut s = connect(addr);
    for (line, n) in ALONE {
        out.extend(command(&mut s, line, *n));
    }
    let mut sub = connect(addr);
    out.extend(command(&mut sub, "SUBSCRIBE news", 1));
    out.extend(command(&mut sub, "PSUBSCRIBE n*", 1));
    out.extend(command(&mut sub, "PSUBSCRIBE x*", 1));
    let mut publisher = connect(addr);
    for (line, n) in [
        ("PUBLISH news hello", 1),
        ("PUBLISH nope hi", 1),
        ("PUBLISH other hi", 1),
        ("PUBSUB NUMSUB news other", 1),
        ("PUBSUB NUMPAT", 1),
        ("PUBSUB CHANNELS", 1),
        ("PUBSUB CHANNELS x*", 1),
        ("PUBSUB CHANNELS n*", 1),
    ] {
        out.extend(command(&mut publisher, line, n));
    }
    // news: a message and a pmessage; nope: a pmessage; other: nothing.
    out.extend(read_replies(&mut sub, 3, "the pushes"));
    out.extend(command(&mut sub, "UNSUBSCRIBE news", 1));
    // A PUBLISH, then a SUBSCRIBE in the same write: the message goes to
    // those subscribed before it, not to its own sender.
    let mut late = connect(addr);
    late.write_all(b"PUBLISH news early\r\nSUBSCRIBE news\r\nPING\r\n").expect("write");
    out.extend(read_replies(&mut late, 3, "PUBLISH, SUBSCRIBE, PING"));
    out.extend(read_replies(&mut sub, 1, "the early pmessage"));
    out.extend(command(&mut sub, "QUIT", 1));
    out
}

fn pubsub_replies_equal_redis_servers(backend: &str) {
    let Some(redis) = Redis::start() else { return };
    let server = Serve::start(backend, &["--proto", "resp", "--threads", "2"]);
    let (want, got) = (transcript(redis.addr), transcript(server.addr));
    let (want, got) = (String::from_utf8_lossy(&want), String::from_utf8_lossy(&got));
    if want != got {
        let first = want.lines().zip(got.lines()).position(|(a, b)| a != b);
        panic!(
            "{backend}: replies differ from redis-server's, first at line {first:?}:\nredis: {want:?}\niomux: {got:?}"
        );
    }
    server.stop();
}

/// Reads pushes of `channel` until `count` arrived: their payloads.
fn payloads(s: &mut TcpStream, count: usize, what: &str) -> Vec<Vec<u8>> {
    let mut got = Vec::with_capacity(count);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    while got.len() < count {
        // Every whole push in what came so far, then one drain.
        let mut at = 0;
        while let Some(len) = reply_len(&buf[at..]) {
            // *3 $7 message $ch ch $n payload: the payload is the last bulk.
            let body = &buf[at..at + len - 2];
            let start = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            got.push(body[start..].to_vec());
            at += len;
            if got.len() == count {
                break;
            }
        }
        buf.drain(..at);
        if got.len() == count {
            break;
        }
        let n = s.read(&mut chunk).unwrap_or_else(|e| panic!("{what}: after {} pushes: {e}", got.len()));
        assert!(n > 0, "{what}: closed after {} pushes", got.len());
        buf.extend_from_slice(&chunk[..n]);
    }
    got
}

fn every_subscriber_gets_every_message_in_order(backend: &str) {
    let _busy = busy();
    const SUBSCRIBERS: usize = 50;
    const PUBLISHERS: usize = 5;
    const EACH: usize = 2_000;
    let server = Serve::start(backend, &["--proto", "resp", "--threads", "2"]);
    let addr = server.addr;
    let mut subscribers: Vec<TcpStream> = (0..SUBSCRIBERS).map(|_| connect(addr)).collect();
    for s in &mut subscribers {
        command(s, "SUBSCRIBE fan", 1);
    }
    let readers: Vec<_> = subscribers
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| thread::spawn(move || payloads(&mut s, PUBLISHERS * EACH, &format!("subscriber {i}"))))
        .collect();
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            thread::spawn(move || {
                let mut s = connect(addr);
                let pipeline: String = (0..EACH).map(|n| format!("PUBLISH fan {p}:{n}\r\n")).collect();
                s.write_all(pipeline.as_bytes()).expect("publish");
                let replies = read_replies(&mut s, EACH, "the publisher's replies");
                let want = format!(":{SUBSCRIBERS}\r\n").repeat(EACH);
                assert_eq!(String::from_utf8_lossy(&replies), want, "every PUBLISH reaches every subscriber");
            })
        })
        .collect();
    publishers.into_iter().for_each(|p| p.join().expect("a publisher"));
    for (i, reader) in readers.into_iter().enumerate() {
        let got = reader.join().expect("a subscriber");
        let mut next = [0usize; PUBLISHERS];
        for payload in got {
            let text = String::from_utf8(payload).expect("utf-8");
            let (p, n) = text.split_once(':').expect("p:n");
            let (p, n): (usize, usize) = (p.parse().unwrap(), n.parse().unwrap());
            assert_eq!(n, next[p], "{backend}: subscriber {i}, publisher {p}: out of order or lost");
            next[p] += 1;
        }
        assert_eq!(next, [EACH; PUBLISHERS], "{backend}: subscriber {i}");
    }
    let (stats, _) = server.stop();
    assert_eq!(stats["pubsub"]["delivered"].as_u64(), Some((SUBSCRIBERS * PUBLISHERS * EACH) as u64), "{stats}");
}

/// A client with a small receive buffer, as a subscriber far away would be.
fn small_window_client(addr: SocketAddr) -> TcpStream {
    use rustix::net::{connect, socket, sockopt, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    sockopt::set_socket_recv_buffer_size(&fd, 4096).expect("SO_RCVBUF");
    connect(&fd, &addr).expect("connect");
    let s = TcpStream::from(fd);
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s
}

/// A subscriber falls behind by a 5.6 MB message, reads some of it, then
/// stops reading, well under the output limits: after a moment it holds
/// nobody back. Its publisher and other clients are answered; it is left
/// to the limits (the review's freeze: publishers paused for good).
fn a_subscriber_that_stops_reading_holds_nobody_back(backend: &str) {
    let server = Serve::start(backend, &["--proto", "resp"]);
    let mut sub = small_window_client(server.addr);
    command(&mut sub, "SUBSCRIBE ch", 1);
    let mut publisher = connect(server.addr);
    let payload = "x".repeat(5_600_000);
    let publish = format!("*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n${}\r\n{payload}\r\n", payload.len());
    publisher.write_all(publish.as_bytes()).expect("publish");
    assert_eq!(read_replies(&mut publisher, 1, "PUBLISH"), b":1\r\n");
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    while got < 1_830_000 {
        got += sub.read(&mut buf).expect("the subscriber's read");
    }
    // It reads no more. The publisher and another client go on.
    assert_eq!(command(&mut publisher, "PING", 1), b"+PONG\r\n", "{backend}: the publisher");
    let mut other = connect(server.addr);
    assert_eq!(command(&mut other, "SET k v", 1), b"+OK\r\n", "{backend}");
    assert_eq!(command(&mut other, "GET k", 1), b"$1\r\nv\r\n", "{backend}");
    assert_eq!(command(&mut publisher, "PUBLISH ch again", 1), b":1\r\n", "{backend}");
    drop(sub);
    server.stop();
}

/// 200 MiB of 1 KiB messages to 20 subscribers that read and one that
/// never does: the 20 get every byte; the one is dropped once 32 MiB wait
/// for it; the server's RSS grows by less than 56 MiB: those 32 MiB, the
/// readers' lag of at most 4 MiB, and room for the allocator and io_uring's
/// buffer rings (measured: 36 to 46 MiB in all). Growth, because a debug
/// build's idle RSS is twice a release build's.
///
/// The publisher waits for the readers to be within `LAG` batches of it.
/// Without that, a reader starved of CPU (two cores, and under SQPOLL two
/// kernel threads spinning) falls 32 MiB behind and is rightly dropped as
/// slow too: the test is about the one that never reads.
fn a_subscriber_that_never_reads_is_dropped_at_the_hard_limit(backend: &str) {
    const READERS: usize = 20;
    const MESSAGES: usize = 200 << 10;
    const LAG: u64 = 4;
    let _heavy = heavy();
    let _measuring = measuring();
    let server = Serve::start(backend, &["--proto", "resp", "--threads", "2"]);
    let addr = server.addr;
    let mut slow = connect(addr);
    command(&mut slow, "SUBSCRIBE bulk", 1);
    let payload = "x".repeat(1000);
    let push_len = format!("*3\r\n$7\r\nmessage\r\n$4\r\nbulk\r\n$1000\r\n{payload}\r\n").len() as u64;
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..READERS).map(|_| AtomicU64::new(0)).collect());
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let mut s = connect(addr);
            command(&mut s, "SUBSCRIBE bulk", 1);
            let progress = progress.clone();
            thread::spawn(move || {
                let want = push_len * MESSAGES as u64;
                let (mut got, mut buf) = (0u64, vec![0u8; 256 << 10]);
                while got < want {
                    let n = s.read(&mut buf).unwrap_or_else(|e| panic!("reader {i}: after {got} bytes: {e}"));
                    assert!(n > 0, "reader {i}: closed after {got} of {want} bytes");
                    got += n as u64;
                    progress[i].store(got, Ordering::Relaxed);
                }
                got
            })
        })
        .collect();
    let idle = rss_of(server.pid()).expect("the server's RSS");
    let rss = PeakRss::start(server.pid());
    let mut publisher = connect(addr);
    let batch: String = (0..1024).map(|_| format!("PUBLISH bulk {payload}\r\n")).collect();
    for sent in 0..(MESSAGES / 1024) as u64 {
        // Once this batch is written, the readers are at most LAG behind.
        let due = (sent + 1).saturating_sub(LAG) * 1024 * push_len;
        let started = Instant::now();
        // A reader that failed has finished early: its join says why.
        while progress.iter().any(|p| p.load(Ordering::Relaxed) < due) && !readers.iter().any(|r| r.is_finished()) {
            assert!(started.elapsed() < Duration::from_secs(30), "{backend}: the readers stopped at batch {sent}");
            thread::sleep(Duration::from_millis(1));
        }
        publisher.write_all(batch.as_bytes()).expect("publish");
        read_replies(&mut publisher, 1024, "the publisher's replies");
    }
    let joined: Vec<_> = readers.into_iter().map(|r| r.join()).collect();
    if joined.iter().any(|r| r.is_err()) {
        let (stats, _) = server.stop();
        panic!("{backend}: a reader failed: {stats}");
    }
    for got in joined {
        assert_eq!(got.unwrap(), push_len * MESSAGES as u64, "{backend}");
    }
    let peak = rss.stop();
    // The slow one was reset: its read ends (after what was sent before).
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = Vec::new();
    let ended = slow.read_to_end(&mut sink);
    assert!(ended.is_ok() || ended.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "{backend}");
    let (stats, _) = server.stop();
    assert_eq!(stats["pubsub"]["slow_dropped"].as_u64(), Some(1), "{backend}: {stats}");
    let grown = peak.saturating_sub(idle);
    eprintln!("{backend}: RSS grew from {} KiB by {} KiB", idle >> 10, grown >> 10);
    assert!(grown < 56 << 20, "{backend}: RSS grew from {} KiB by {} KiB", idle >> 10, grown >> 10);
}

/// Publishers pipelining 1,000,000 publishes at once, subscribers on both
/// loops: every message reaches every subscriber, and no loop's inbox ever
/// held more than its capacity (publishers were held back instead).
fn a_burst_of_publishes_keeps_the_inboxes_bounded(backend: &str) {
    let _busy = busy();
    const SUBSCRIBERS: usize = 4;
    const PUBLISHERS: usize = 4;
    const EACH: usize = 250_000;
    let server = Serve::start(backend, &["--proto", "resp", "--threads", "2"]);
    let addr = server.addr;
    let mut subscribers: Vec<TcpStream> = (0..SUBSCRIBERS).map(|_| connect(addr)).collect();
    for s in &mut subscribers {
        command(s, "SUBSCRIBE burst", 1);
    }
    let readers: Vec<_> = subscribers
        .into_iter()
        .map(|mut s| thread::spawn(move || payloads(&mut s, PUBLISHERS * EACH, "a subscriber").len()))
        .collect();
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|_| {
            thread::spawn(move || {
                let mut s = connect(addr);
                let pipeline = "PUBLISH burst m\r\n".repeat(EACH);
                let mut r = s.try_clone().unwrap();
                let reader = thread::spawn(move || read_replies(&mut r, EACH, "the publisher's replies").len());
                s.write_all(pipeline.as_bytes()).expect("publish");
                reader.join().expect("replies")
            })
        })
        .collect();
    publishers.into_iter().for_each(|p| assert!(p.join().expect("a publisher") > 0));
    for reader in readers {
        assert_eq!(reader.join().expect("a subscriber"), PUBLISHERS * EACH, "{backend}");
    }
    let (stats, _) = server.stop();
    let (peak, refused) = (stats["inbox_peak"].as_u64().unwrap(), stats["inbox_refused"].as_u64().unwrap());
    eprintln!("{backend}: inbox peak {peak}, refused {refused}, held {}", stats["pubsub"]["held"]);
    assert!(peak <= 4096, "{backend}: an inbox held {peak} deliveries: {stats}");
}

/// redis-cli, the client users have: SUBSCRIBE on one loop, PUBLISH on the
/// other, the message comes through.
#[test]
fn redis_cli_subscribes_and_publishes() {
    if Command::new("redis-cli").arg("--version").output().is_err() {
        assert!(std::env::var("CI").is_err(), "CI=true but redis-cli is missing (scripts/install-http-tools)");
        eprintln!("skipped: no redis-cli (scripts/install-http-tools installs it)");
        return;
    }
    let server = Serve::start("epoll", &["--proto", "resp", "--threads", "2"]);
    let port = server.addr.port().to_string();
    let sub = Command::new("redis-cli")
        .args(["-p", &port, "SUBSCRIBE", "news"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli SUBSCRIBE");
    let mut published = String::new();
    for _ in 0..100 {
        let out = Command::new("redis-cli").args(["-p", &port, "PUBLISH", "news", "hello"]).output().expect("PUBLISH");
        published = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if published == "1" {
            break;
        }
        thread::sleep(Duration::from_millis(20)); // the subscriber is still connecting
    }
    assert_eq!(published, "1", "PUBLISH's receivers");
    thread::sleep(Duration::from_millis(100));
    let mut sub = sub;
    let _ = sub.kill();
    let out = sub.wait_with_output().expect("redis-cli's output");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "subscribe\nnews\n1\nmessage\nnews\nhello\n");
    server.stop();
}
