//! `iomux serve --proto resp` against redis-server, reply for reply: the
//! same script of commands goes to both, one by one, pipelined in one
//! write, and byte by byte, and the replies must be equal byte for byte;
//! then each protocol error, on a connection of its own, must get the
//! same error and the same close. On every backend. And a pipeline of
//! GETs of a large value is served from the one shared copy.
//!
//! Without redis-server the test says so and passes, except under
//! CI=true, where .ci/run has installed it (scripts/install-http-tools).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use support::*;

/// Commands whose replies do not depend on when they run (TTLs are read
/// right after they are set, so both servers round them alike).
const SCRIPT: &[&[u8]] = &[
    b"PING",
    b"PING hi",
    b"ECHO \"a b\"",
    b"SET k v",
    b"GET k",
    b"GET nope",
    b"SET k v NX",
    b"SET k w XX",
    b"SET k x GET",
    b"SET n x XX GET",
    b"SET a 1",
    b"EXISTS a b k a",
    b"DEL a c",
    b"INCR cnt",
    b"INCR cnt",
    b"DECR cnt",
    b"DECR m",
    b"SET s abc",
    b"INCR s",
    b"SET big 9223372036854775807",
    b"INCR big",
    b"GET",
    b"PING a b",
    b"FOO a b",
    b"FOO",
    b"SET k v EX",
    b"SET k v NX XX",
    b"SET k v EX 0",
    b"SET k v EX x",
    b"SET k v PX -5",
    b"SET k v KEEPTTL EX 5",
    b"EXPIRE k 100",
    b"TTL k",
    b"TTL nope",
    b"SET p 1",
    b"TTL p",
    b"EXPIRE p 50 NX",
    b"EXPIRE p 100 GT",
    b"TTL p",
    b"EXPIRE p 30 LT",
    b"TTL p",
    b"EXPIRE p 1 NX XX",
    b"EXPIRE p 1 GT LT",
    b"EXPIRE p 1 FOO",
    b"EXPIRE p x",
    b"EXPIRE nope 5",
    b"SET gone 1",
    b"EXPIRE gone -1",
    b"EXISTS gone",
    b"CONFIG FOO",
    b"CONFIG GET save",
    b"CONFIG GET appendonly",
    b"CONFIG GET nosuch",
    b"CONFIG",
    b"CONFIG GET",
    b"DBSIZE",
    b"SET 'q x' \"y\\tz\"",
    b"GET 'q x'",
    b"ECHO \"\\x41\\x4a\"",
    b"DEL",
    b"EXISTS",
    b"INCR",
    b"TTL",
    b"ECHO",
    b"SET x",
    b"get K",
    b"Set k V",
    b"gEt k",
    b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n",
    b"*3\r\n$3\r\nSET\r\n$3\r\nb\0b\r\n$2\r\n\r\n\r\n*2\r\n$3\r\nGET\r\n$3\r\nb\0b\r\n",
    b"FLUSHALL ASYNC",
    b"FLUSHALL X",
    b"DBSIZE",
];

/// Requests that are protocol errors: each gets an error and a close.
const BROKEN: &[&[u8]] = &[
    b"*2\r\n$3\r\nGET\r\n:1\r\n",
    b"*x\r\n",
    b"*1\r\n$-5\r\n",
    b"*1\r\n$536870913\r\n",
    b"GET \"k\r\n",
    b"GET \"k\"x\r\n",
    b"*1\r\n$3\r\nabc\r\n*1\r\n$z\r\n",
    b"PING\r\nQUIT\r\nPING\r\n",
];

fn request(command: &[u8]) -> Vec<u8> {
    let mut r = command.to_vec();
    if r.first() != Some(&b'*') {
        r.extend_from_slice(b"\r\n");
    }
    r
}

/// How many requests a script entry holds (one, or several multibulk).
fn requests_in(command: &[u8]) -> usize {
    if command.first() == Some(&b'*') {
        command.split(|&b| b == b'*').filter(|p| !p.is_empty() && p[0].is_ascii_digit()).count()
    } else {
        1
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// The script's replies from `addr` in one of the three modes.
fn replies(addr: SocketAddr, mode: &str) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(b"FLUSHALL\r\n").expect("write");
    read_replies(&mut s, 1, &format!("{addr}: FLUSHALL"));
    let total: usize = SCRIPT.iter().map(|c| requests_in(c)).sum();
    match mode {
        "one by one" => SCRIPT
            .iter()
            .flat_map(|c| {
                s.write_all(&request(c)).expect("write");
                read_replies(&mut s, requests_in(c), &format!("{addr}: {:?}", String::from_utf8_lossy(c)))
            })
            .collect(),
        "pipelined" => {
            s.write_all(&SCRIPT.iter().flat_map(|c| request(c)).collect::<Vec<u8>>()).expect("write");
            read_replies(&mut s, total, &format!("{addr}: {mode}"))
        }
        _ => {
            for byte in SCRIPT.iter().flat_map(|c| request(c)) {
                s.write_all(&[byte]).expect("write");
            }
            read_replies(&mut s, total, &format!("{addr}: {mode}"))
        }
    }
}

/// What a broken request gets: everything until the close.
fn until_close(addr: SocketAddr, input: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(input).expect("write");
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => got,
        Err(e) => panic!("no close after {:?}: {e}", String::from_utf8_lossy(&got)),
    }
}

fn same_replies_as_redis_server(backend: &str) {
    let Some(redis) = Redis::start() else { return };
    let server = Serve::start(backend, &["--proto", "resp"]);
    for mode in ["one by one", "pipelined", "byte by byte"] {
        let (want, got) = (replies(redis.addr, mode), replies(server.addr, mode));
        if want != got {
            let (want, got) = (String::from_utf8_lossy(&want), String::from_utf8_lossy(&got));
            let first = want.lines().zip(got.lines()).position(|(a, b)| a != b);
            panic!("{backend}, {mode}: replies differ from redis-server's, first at line {first:?}:\nredis: {want:?}\niomux: {got:?}");
        }
    }
    for input in BROKEN {
        let (want, got) = (until_close(redis.addr, input), until_close(server.addr, input));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{backend}: {:?}",
            String::from_utf8_lossy(input)
        );
    }
    server.stop();
}

on_every_backend!(same_replies_as_redis_server);

/// Forty pipelined GETs of a 3 MB value, read only after a pause: the
/// value is shared with its replies, not copied into each, so the
/// server's memory stays within its output bound plus one value plus a
/// fixed bound; every reply arrives intact, in gathered sends.
fn large_values_are_shared_not_copied(backend: &str) {
    const VALUE: usize = 3_000_000;
    const GETS: usize = 40;
    let server = Serve::start(backend, &["--proto", "resp"]);
    let mut s = connect(server.addr);
    let value: Vec<u8> = (0..VALUE).map(|i| (i % 251) as u8).collect();
    let mut set = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${VALUE}\r\n").into_bytes();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    s.write_all(&set).expect("write SET");
    assert_eq!(read_replies(&mut s, 1, "SET big"), b"+OK\r\n");
    let baseline = server.rss();
    s.write_all(&request(b"GET big").repeat(GETS)).expect("write GETs");
    std::thread::sleep(Duration::from_millis(300));
    let grown = server.rss().saturating_sub(baseline);
    let mut want = format!("${VALUE}\r\n").into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");
    let mut got = vec![0u8; want.len()];
    for i in 0..GETS {
        s.read_exact(&mut got).unwrap_or_else(|e| panic!("{backend}: reply {i}: {e}"));
        assert!(got == want, "{backend}: reply {i} differs from the value set");
    }
    drop(s);
    let (stats, _) = server.stop();
    eprintln!("{backend}: RSS grew {grown} bytes under {GETS} GETs of {VALUE} bytes");
    assert!(stats["gathered_sends"].as_u64().unwrap_or(0) > 0, "{backend}: no gathered send: {stats}");
    // One copy of the value per queued reply would take 3 MB at least.
    let bound = VALUE as u64 / 2;
    assert!(grown < bound, "{backend}: RSS grew {grown} bytes, bound {bound}: replies copied the value");
}

on_every_backend!(large_values_are_shared_not_copied);
