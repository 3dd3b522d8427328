//! `iomux load` against its own server and against small independent
//! servers written here with std only: counts agree, corruption is caught,
//! stalls show in open-loop latency, many connections and source addresses.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

/// A thread-per-connection echo server on std alone.
struct StdEcho {
    addr: SocketAddr,
    echoed: Arc<AtomicU64>,
    peers: Arc<Mutex<BTreeSet<IpAddr>>>,
}

#[derive(Clone, Copy, Default)]
struct Faults {
    /// Flip one bit of the n-th byte the server ever echoes.
    flip_byte: Option<u64>,
    /// Stop echoing on every connection for this long, this long after the
    /// first byte arrives.
    stall: Option<(Duration, Duration)>,
}

impl StdEcho {
    fn start(faults: Faults) -> StdEcho {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let echoed = Arc::new(AtomicU64::new(0));
        let peers = Arc::new(Mutex::new(BTreeSet::new()));
        let first_byte: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let (e, p) = (echoed.clone(), peers.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                if let Ok(peer) = s.peer_addr() {
                    p.lock().unwrap().insert(peer.ip());
                }
                let (e, first_byte) = (e.clone(), first_byte.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let start = *first_byte.lock().unwrap().get_or_insert_with(Instant::now);
                        if let Some((after, length)) = faults.stall {
                            let (from, to) = (start + after, start + after + length);
                            let now = Instant::now();
                            if now >= from && now < to {
                                std::thread::sleep(to - now);
                            }
                        }
                        let before = e.fetch_add(n as u64, Ordering::SeqCst);
                        if let Some(k) = faults.flip_byte {
                            if (before..before + n as u64).contains(&k) {
                                buf[(k - before) as usize] ^= 0x10;
                            }
                        }
                        if s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        StdEcho { addr, echoed, peers }
    }
}

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn echo_counts_match_an_independent_server() {
    let server = StdEcho::start(Faults::default());
    let LoadRun { report, status, output } =
        load(server.addr, &["--conns", "20", "--requests", "5000", "--msg-size", "100"]);
    assert!(status.success(), "{}", output);
    assert_eq!(report["echoes"], 5000, "{report}");
    assert_eq!(report["errors"]["total"], 0);
    assert_eq!(server.echoed.load(Ordering::SeqCst), 5000 * 100, "the server echoed exactly what was verified");
    let latency = &report["latency"];
    for q in ["p50_us", "p90_us", "p99_us", "p999_us", "max_us"] {
        assert!(latency[q].as_f64().unwrap() > 0.0, "{q}: {latency}");
    }
    assert!(latency["p50_us"].as_f64() <= latency["p99_us"].as_f64());
}

#[test]
fn echo_counts_match_iomux_serve() {
    let server = Serve::start("epoll", &[]);
    let LoadRun { report, status, output } =
        load(server.addr, &["--conns", "50", "--duration", "1", "--msg-size", "64"]);
    let (stats, _) = server.stop();
    assert!(status.success(), "{}", output);
    let echoes = report["echoes"].as_u64().unwrap();
    assert!(echoes > 0);
    // Nothing is measured during warm-up here, so every echo was counted.
    assert_eq!(stats["bytes_out"].as_u64().unwrap(), echoes * 64, "{report}");
}

#[test]
fn a_corrupting_server_is_caught() {
    let server = StdEcho::start(Faults { flip_byte: Some(12_345), ..Faults::default() });
    let LoadRun { report, status, output } = load(server.addr, &["--conns", "4", "--requests", "1000"]);
    assert!(!status.success(), "corruption must fail the run: {}", output);
    assert_eq!(report["errors"]["mismatches"], 1, "{report}");
    let first = report["errors"]["first"].as_str().unwrap();
    assert!(first.contains("differs from what was sent"), "{first}");
    assert!(output.contains("1 mismatched"), "{}", output);
}

#[test]
fn open_loop_latency_includes_a_server_stall() {
    let stall = Duration::from_millis(600);
    let server = StdEcho::start(Faults { stall: Some((Duration::from_millis(500), stall)), ..Faults::default() });
    let LoadRun { report, status, output } = load(server.addr, &["--conns", "10", "--rate", "2000", "--duration", "3"]);
    assert!(status.success(), "{}", output);
    let lat = &report["latency"];
    let (p90, max) = (lat["p90_us"].as_f64().unwrap(), lat["max_us"].as_f64().unwrap());
    // Messages due during the stall waited for it from their scheduled
    // time: a fifth of the run was stalled, so p90 is well into it.
    assert!(max >= 0.9 * stall.as_micros() as f64, "max {max} us: {lat}");
    assert!(p90 >= 100_000.0, "p90 {p90} us hides the stall (coordinated omission): {lat}");
    // The schedule was kept: about rate x duration messages went out.
    let sent = report["sent_messages"].as_u64().unwrap();
    assert!((5400..=6100).contains(&sent), "{sent} messages sent for 2000/s over 3 s");
}

#[test]
fn fifteen_thousand_connections_from_one_process() {
    let _heavy = heavy();
    let server = Serve::start("epoll", &[]);
    let LoadRun { report, status, output } =
        load(server.addr, &["--conns", "15000", "--requests", "30000", "--threads", "2"]);
    let (stats, _) = server.stop();
    assert!(status.success(), "{}", output);
    assert_eq!(report["connected"], 15_000, "{report}");
    assert_eq!(report["echoes"], 30_000);
    assert_eq!(stats["accepted"], 15_000);
    assert_eq!(stats["bytes_out"], 30_000 * 100);
}

#[test]
fn bind_spreads_connections_over_source_addresses() {
    let server = StdEcho::start(Faults::default());
    let LoadRun { report, status, output } =
        load(server.addr, &["--conns", "40", "--requests", "400", "--bind", "127.0.0.2-127.0.0.5"]);
    assert!(status.success(), "{}", output);
    assert_eq!(report["echoes"], 400);
    let peers: Vec<String> = server.peers.lock().unwrap().iter().map(|ip| ip.to_string()).collect();
    assert_eq!(peers, ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]);
}

#[test]
fn sink_mode_sends_and_reads_nothing() {
    let server = Serve::start("epoll", &["--proto", "sink"]);
    let LoadRun { report, status, output } = load(server.addr, &["--mode", "sink", "--conns", "4", "--duration", "1"]);
    let (stats, _) = server.stop();
    assert!(status.success(), "{}", output);
    let sent = report["sent_bytes"].as_u64().unwrap();
    assert!(sent > 1 << 20, "{report}");
    // Whatever was still in flight at the end is in the server's count too.
    assert_eq!(stats["bytes_in"].as_u64().unwrap(), sent, "the sink received every byte sent");
    assert_eq!(stats["bytes_out"], 0);
}

#[test]
fn bad_flags_and_limits_are_explained() {
    let addr = "127.0.0.1:9";
    let fds = iomux().args(["load", "--connect", addr, "--conns", "30000", "--idle", "5000"]).output().unwrap();
    let t = text(&fds);
    assert!(!fds.status.success());
    assert!(t.contains("RLIMIT_NOFILE") && t.contains("several"), "{t}");
    let rate = iomux().args(["load", "--connect", addr, "--rate", "-5"]).output().unwrap();
    assert!(!rate.status.success());
    let both = iomux().args(["load", "--connect", addr, "--requests", "5", "--duration", "1"]).output().unwrap();
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
    let bind = iomux().args(["load", "--connect", addr, "--bind", "127.0.0.9-127.0.0.1"]).output().unwrap();
    assert_eq!(bind.status.code(), Some(2));
    assert!(text(&bind).contains("ends before it starts"));
}

/// A server that never answers is given up on (--timeout), not waited for forever.
#[test]
fn a_silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::thread::spawn(move || {
        listener.accept().map(|(s, _)| {
            std::thread::sleep(Duration::from_secs(4));
            drop(s);
        })
    });
    let start = Instant::now();
    let LoadRun { report, status, output } = load(addr, &["--conns", "1", "--requests", "10", "--timeout", "1"]);
    assert!(!status.success());
    assert!(start.elapsed() < Duration::from_secs(4), "took {:?}", start.elapsed());
    assert_eq!(report["errors"]["unanswered"], 1, "{report}");
    assert!(output.contains("no echo arrived"), "{}", output);
    let _ = held.join();
}

/// The stream never ends early: a server that closes mid-run is reported.
#[test]
fn a_server_that_hangs_up_is_an_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            // Echo half of the first message, then hang up.
            let mut buf = [0u8; 100];
            if s.read_exact(&mut buf).is_ok() {
                let _ = s.write_all(&buf[..50]);
            }
            drop(s);
            if s2.load(Ordering::Relaxed) {
                return;
            }
        }
    });
    let LoadRun { report, status, output } = load(addr, &["--conns", "1", "--requests", "100"]);
    stop.store(true, Ordering::Relaxed);
    assert!(!status.success(), "{}", output);
    assert_eq!(report["errors"]["unexpected_closes"], 1, "{report}");
    let _ = TcpStream::connect(addr);
}
