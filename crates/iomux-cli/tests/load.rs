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
    // The load's own CPU over the measured second, per echo (what the
    // load must keep below the server's).
    let cpu = report["cpu_s"].as_f64().unwrap();
    assert!(cpu > 0.0 && cpu < 5.0, "{report}");
    let per_echo = report["cpu_us_per_echo"].as_f64().unwrap();
    assert!((per_echo - cpu * 1e6 / echoes as f64).abs() < 1e-6, "{report}");
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
    assert_eq!(report["tick_us"], 100, "the schedule's grid is in the result");
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

/// --per-conn with some connections reset by the server mid-run: the
/// others still finish their messages and the run ends, each reset named
/// (a reset connection's unsent messages leave the run's quota).
#[test]
fn resets_mid_run_end_a_per_conn_run() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for (k, stream) in listener.incoming().enumerate() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 100];
                // Every second connection: three echoes, then a reset.
                let mut echoes = 0;
                while s.read_exact(&mut buf).is_ok() && s.write_all(&buf).is_ok() {
                    echoes += 1;
                    if k % 2 == 1 && echoes == 3 {
                        let _ = rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO));
                        return;
                    }
                }
            });
        }
    });
    let started = Instant::now();
    let LoadRun { report, status, output } = load(addr, &["--conns", "4", "--per-conn", "10", "--timeout", "5"]);
    assert!(started.elapsed() < Duration::from_secs(5), "the run ended by itself: {output}");
    assert!(!status.success(), "{output}");
    assert_eq!(report["errors"]["unexpected_closes"], 2, "{report}");
    assert_eq!(report["errors"]["resets"], 2, "{report}");
    assert_eq!(report["echoes"], 2 * 10 + 2 * 3, "{report}");
}

/// A server that echoes 100-byte messages and resets every connection
/// after three echoes.
fn resetting_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 100];
                for _ in 0..3 {
                    if s.read_exact(&mut buf).is_err() || s.write_all(&buf).is_err() {
                        return;
                    }
                }
                let _ = rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO));
            });
        }
    });
    addr
}

/// --reconnect: a connection the server resets is replaced, its unanswered
/// message sent again on the new one, until every message is echoed.
#[test]
fn reconnect_replaces_reset_connections_until_every_message_is_echoed() {
    let addr = resetting_server();
    let args = ["--conns", "4", "--per-conn", "10", "--reconnect", "5", "--timeout", "5"];
    let LoadRun { report, output, .. } = load(addr, &args);
    let e = &report["errors"];
    // Each connection: messages 0-2, 3-5, 6-8 on three that are reset, 9
    // on a fourth.
    assert_eq!(report["echoes"], 4 * 10, "every message echoed: {report}\n{output}");
    assert_eq!(e["unanswered"], 0, "{report}");
    assert_eq!(e["reconnects"], 4 * 3, "{report}");
    assert_eq!(e["resets"], 4 * 3, "each reset still counted: {report}");
    assert_eq!(e["unexpected_closes"], 4 * 3, "{report}");
    assert!(output.contains("12 reconnected"), "{output}");
}

/// The same in an open loop: the carried message goes before anything the
/// schedule stages, and every echo checks out.
#[test]
fn reconnect_keeps_an_open_loop_in_order() {
    let addr = resetting_server();
    let args = ["--conns", "4", "--per-conn", "30", "--rate", "4000", "--reconnect", "20", "--timeout", "5"];
    let LoadRun { report, output, .. } = load(addr, &args);
    let e = &report["errors"];
    assert_eq!(e["mismatches"], 0, "{report}\n{output}");
    assert_eq!(report["echoes"], 4 * 30, "{report}\n{output}");
    assert_eq!(e["unanswered"], 0, "{report}");
}

/// A folder of its own for one test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("iomux-load-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A result's `latency_hdr`, decoded as any HdrHistogram user would.
fn histogram(result: &serde_json::Value) -> hdrhistogram::Histogram<u64> {
    use base64::Engine;
    let text = result["latency_hdr"].as_str().expect("latency_hdr");
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).unwrap();
    hdrhistogram::serialization::Deserializer::new().deserialize(&mut &bytes[..]).unwrap()
}

#[test]
fn shards_merge_into_exactly_the_whole_load() {
    let server = Serve::start("epoll", &[]);
    let dir = scratch("shards");
    let addr = server.addr.to_string();
    let files: Vec<_> = (0..3).map(|i| dir.join(format!("shard-{i}.json"))).collect();
    for (i, file) in files.iter().enumerate() {
        let mut cmd = iomux();
        cmd.args(["load", "--connect", &addr, "--conns", "30", "--per-conn", "50", "--json"]).arg(file);
        // Shard 1 the Kubernetes way: the index from the environment.
        if i == 1 {
            cmd.args(["--shard-count", "3"]).env("JOB_COMPLETION_INDEX", "1");
        } else {
            cmd.args(["--shard", &format!("{i}/3")]).env_remove("JOB_COMPLETION_INDEX");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "shard {i}: {}", text(&out));
    }
    let merged_file = dir.join("merged.json");
    let out = iomux().arg("merge").args(&files).arg("--json").arg(&merged_file).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("1500 echoes verified"), "{}", text(&out));
    let shards: Vec<_> = files.iter().map(|f| read_json(f)).collect();
    let merged = read_json(&merged_file);
    let (stats, _) = server.stop();
    std::fs::remove_dir_all(&dir).ok();

    let sum = |key: &str| shards.iter().map(|s| s[key].as_u64().unwrap()).sum::<u64>();
    assert_eq!(merged["echoes"], 30 * 50);
    assert_eq!(merged["echoes"], sum("echoes"));
    assert_eq!(merged["connected"], 30);
    assert_eq!(merged["connected"], sum("connected"));
    assert_eq!(merged["errors"]["total"], 0);
    assert_eq!(stats["accepted"], 30, "the server saw the whole load");
    assert_eq!(stats["bytes_out"], 30 * 50 * 100);
    // Each shard numbered its own connections.
    let firsts: Vec<u64> = shards.iter().map(|s| s["first_conn"].as_u64().unwrap()).collect();
    assert_eq!(firsts, [0, 10, 20]);
    // Percentiles come from the sum of the histograms, to the nanosecond.
    let mut whole = histogram(&shards[0]);
    for s in &shards[1..] {
        whole.add(histogram(s)).unwrap();
    }
    assert_eq!(whole.len(), 1500);
    assert_eq!(histogram(&merged), whole);
    for (q, key) in [(0.5, "p50_us"), (0.99, "p99_us"), (0.999, "p999_us")] {
        let expected = whole.value_at_quantile(q) as f64 / 1000.0;
        assert_eq!(merged["latency"][key].as_f64().unwrap(), expected, "{key}");
    }
    assert_eq!(merged["merged_files"].as_array().unwrap().len(), 3);
    // The last answer comes after the last send, and the merge keeps the latest.
    let drained = |r: &serde_json::Value| r["drained_at"].as_f64().unwrap();
    for s in &shards {
        assert!(drained(s) >= s["measure_window"][1].as_f64().unwrap(), "{s}");
    }
    assert_eq!(drained(&merged), shards.iter().map(drained).fold(0.0, f64::max));
}

#[test]
fn three_processes_verify_every_byte_and_agree_with_the_server() {
    let server = Serve::start("epoll", &[]);
    let LoadRun { report, status, output } =
        load(server.addr, &["--procs", "3", "--conns", "30", "--requests", "3000", "--threads", "2"]);
    let (stats, _) = server.stop();
    assert!(status.success(), "{output}");
    assert_eq!(report["echoes"], 3000, "{report}");
    assert_eq!(report["connected"], 30);
    assert_eq!(report["errors"]["total"], 0);
    assert_eq!(report["errors"]["mismatches"], 0, "every echoed byte matched");
    assert_eq!(stats["accepted"], 30);
    assert_eq!(stats["bytes_out"], 3000 * 100, "the server echoed exactly what was verified");
    let procs = report["procs"].as_array().unwrap();
    assert_eq!(procs.len(), 3);
    let firsts: Vec<u64> = procs.iter().map(|p| p["first_conn"].as_u64().unwrap()).collect();
    assert_eq!(firsts, [0, 10, 20]);
    assert_eq!(procs.iter().map(|p| p["echoes"].as_u64().unwrap()).sum::<u64>(), 3000);
    assert_eq!(histogram(&report).len(), 3000);
    assert_eq!(report["client"]["loops"], 6, "two loops in each of three processes");
}

/// More connections than one process may hold (20,000 descriptors here),
/// on both sides: `serve --procs 3` and `load --procs 3`.
#[test]
fn thirty_thousand_connections_over_three_processes_each_side() {
    let _turn = heavy();
    let server = Serve::start("epoll", &["--procs", "3"]);
    let LoadRun { report, status, output } =
        load(server.addr, &["--procs", "3", "--conns", "30000", "--per-conn", "2", "--timeout", "120"]);
    let (stats, _) = server.stop();
    assert!(status.success(), "{output}");
    assert_eq!(report["connected"], 30_000, "{output}");
    assert_eq!(report["echoes"], 60_000, "{report}");
    assert_eq!(report["errors"]["total"], 0, "{report}");
    assert_eq!(stats["procs"], 3);
    assert_eq!(stats["accepted"], 30_000, "server and client agree: {stats}");
    assert_eq!(stats["bytes_in"], 60_000 * 100);
    assert_eq!(stats["bytes_out"], 60_000 * 100, "the server echoed exactly what was verified");
    let per_worker: Vec<u64> =
        stats["workers"].as_array().unwrap().iter().map(|w| w["accepted"].as_u64().unwrap()).collect();
    assert!(per_worker.iter().all(|&n| n < 20_000), "no worker held more than one process may: {per_worker:?}");
    assert!(output.contains("source addresses"), "30,000 connections spread over source addresses: {output}");
}

#[test]
fn the_hdr_log_is_a_standard_interval_log() {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let server = Serve::start("epoll", &[]);
    let dir = scratch("hdrlog");
    let log = dir.join("latency.hlog");
    let log_arg = log.to_str().unwrap();
    let LoadRun { report, status, output } = load(
        server.addr,
        &["--procs", "2", "--conns", "4", "--rate", "2000", "--duration", "2.5", "--hdr-log", log_arg],
    );
    server.stop();
    assert!(status.success(), "{output}");
    let bytes = std::fs::read(&log).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("#[Histogram log format version 1.3]"), "{text}");
    assert!(text.contains("\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""));
    let (mut start, mut base, mut starts, mut count) = (None, None, Vec::new(), 0);
    for entry in IntervalLogIterator::new(&bytes) {
        match entry.expect("every line parses") {
            LogEntry::StartTime(t) => start = Some(t),
            LogEntry::BaseTime(t) => base = Some(t),
            LogEntry::Interval(i) => {
                use base64::Engine;
                assert_eq!(i.duration(), Duration::from_secs(1));
                starts.push(i.start_timestamp().as_secs_f64());
                let raw = base64::engine::general_purpose::STANDARD.decode(i.encoded_histogram()).unwrap();
                let h: hdrhistogram::Histogram<u64> =
                    hdrhistogram::serialization::Deserializer::new().deserialize(&mut &raw[..]).unwrap();
                count += h.len();
            }
        }
    }
    let (start, base) = (start.expect("StartTime"), base.expect("BaseTime"));
    assert!(base <= start && start - base < Duration::from_secs(1), "{base:?} {start:?}");
    assert!((3..=5).contains(&starts.len()), "2.5 s in 1 s intervals: {starts:?}");
    assert!(starts.windows(2).all(|w| w[1] == w[0] + 1.0), "one line a second: {starts:?}");
    assert_eq!(count, report["latency"]["count"].as_u64().unwrap(), "the intervals add up to the whole");
}

#[test]
fn bad_shard_and_process_flags_are_refused_before_any_work() {
    let addr = "127.0.0.1:9";
    let out = iomux().args(["load", "--connect", addr, "--shard", "3/3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("does not exist"), "{}", text(&out));
    let out = iomux()
        .args(["load", "--connect", addr, "--shard-count", "2"])
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("JOB_COMPLETION_INDEX"), "{}", text(&out));
    assert!(!text(&out).contains("unreachable"), "refused before connecting: {}", text(&out));
    let out = iomux().args(["load", "--connect", addr, "--procs", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = iomux().args(["load", "--connect", addr, "--procs", "5", "--conns", "2"]).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("exceeds"), "{}", text(&out));
    let out = iomux().args(["load", "--connect", addr, "--shard", "1/2", "--shard-count", "2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn children_that_cannot_connect_fail_the_run() {
    // Nothing listens on the discard port here: every child is refused.
    let out = iomux()
        .args(["load", "--connect", "127.0.0.1:9", "--procs", "2", "--conns", "4", "--requests", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("process 0") && t.contains("process 1") && t.contains("refused"), "{t}");
}

#[test]
fn merge_refuses_what_does_not_add_up() {
    let server = Serve::start("epoll", &[]);
    let dir = scratch("refuse");
    let a = dir.join("a.json");
    let LoadRun { status, output, report } = load(server.addr, &["--conns", "2", "--requests", "20"]);
    server.stop();
    assert!(status.success(), "{output}");
    std::fs::write(&a, report.to_string()).unwrap();
    let mut other = report.clone();
    other["msg_size"] = 64.into();
    let b = dir.join("b.json");
    std::fs::write(&b, other.to_string()).unwrap();
    let not_load = dir.join("c.json");
    std::fs::write(&not_load, r#"{"accepted": 3}"#).unwrap();
    let out = iomux().arg("merge").arg(&a).arg(&b).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("b.json") && text(&out).contains("msg_size"), "{}", text(&out));
    let out = iomux().arg("merge").arg(&a).arg(&not_load).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("c.json") && text(&out).contains("not an `iomux load"), "{}", text(&out));
    // One file merges into itself.
    let out = iomux().arg("merge").arg(&a).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::remove_dir_all(&dir).ok();
}

/// `iomux limits` names what blocks a run and how to lift it; a load
/// that one process cannot hold is refused before any connection.
#[test]
fn limits_name_the_blocking_setting_and_its_fix() {
    // More connections than one process may hold, wherever this runs.
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum.unwrap_or(1 << 20);
    let too_many = (hard + 1000).to_string();
    let out = iomux().args(["limits", "--conns", &too_many, "--procs", "1"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let line = said.lines().find(|l| l.contains("RLIMIT_NOFILE")).expect("an RLIMIT_NOFILE row");
    assert!(line.contains("BLOCKS"), "{said}");
    assert!(said.contains("run more processes (--procs)"), "{said}");
    let fine = iomux().args(["limits", "--conns", "1000"]).output().unwrap();
    assert!(fine.status.success(), "{}", String::from_utf8_lossy(&fine.stdout));
    let sysctl = iomux().args(["limits", "--conns", "1000", "--sysctl"]).output().unwrap();
    assert!(sysctl.status.success());
    for line in String::from_utf8_lossy(&sysctl.stdout).lines() {
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("not key=value: {line}"));
        assert!(!key.is_empty() && !value.is_empty(), "{line}");
    }
    let load = iomux().args(["load", "--connect", "127.0.0.1:9", "--conns", &too_many]).output().unwrap();
    let said = String::from_utf8_lossy(&load.stderr);
    assert_eq!(load.status.code(), Some(1), "{said}");
    assert!(said.contains("--procs"), "the refusal says how to run it: {said}");
}
