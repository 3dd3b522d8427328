//! `iomux serve` on every backend, from a separate process: bytes intact,
//! memory bounded, fairness, EMFILE, half-close, reset, graceful stop;
//! then several worker processes on one port (`--procs`).

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use support::*;

/// 500 connections at once, each sending chunks of 1 B to 256 KiB at a
/// random pace; every echoed byte must be what was sent.
fn echo_integrity(backend: &str) {
    let _heavy = heavy();
    raise_fd_limit();
    let server = Serve::start(backend, &[]);
    const CONNS: usize = 500;
    const THREADS: usize = 50;
    let barrier = Arc::new(Barrier::new(THREADS));
    let sent_total = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (addr, barrier, sent_total) = (server.addr, barrier.clone(), sent_total.clone());
            std::thread::spawn(move || {
                let mut conns: Vec<TcpStream> = (0..CONNS / THREADS)
                    .map(|_| {
                        let s = TcpStream::connect(addr).expect("connect");
                        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                        s
                    })
                    .collect();
                // Every connection is open before any traffic starts.
                barrier.wait();
                let mut rng = Rng::new(t as u64 + 1);
                for _round in 0..4 {
                    for s in conns.iter_mut() {
                        let size = rng.size(256 << 10);
                        let chunk = rng.bytes(size);
                        round_trip(s, &chunk);
                        sent_total.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        if rng.below(4) == 0 {
                            std::thread::sleep(Duration::from_micros(rng.below(2000)));
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
    let sent = sent_total.load(Ordering::Relaxed);
    let (stats, _) = server.stop();
    assert_eq!(stats["accepted"], CONNS as u64, "{backend}");
    assert_eq!(stats["bytes_in"], sent, "{backend}");
    assert_eq!(stats["bytes_out"], sent, "{backend}");
    assert_eq!(stats["closed_abnormally"], 0, "{backend}: {stats}");
    if backend.starts_with("uring") {
        // Submit and wait together: at most one io_uring_enter per turn.
        // (+3: the ring's teardown waits for its cancellations in 20 ms
        // rounds, a few of them when the SQPOLL thread has to share a CPU.)
        let enters = stats["syscalls"]["io_uring_enter"].as_u64().unwrap_or(0);
        assert!(enters <= stats["turns"].as_u64().unwrap() + 3, "{backend}: {stats}");
        assert!(stats["syscalls"]["read"].is_null() && stats["syscalls"]["write"].is_null(), "{stats}");
        let expect = if backend == "uring" { "single_issuer+defer_taskrun" } else { "sqpoll" };
        assert_eq!(stats["uring_setup"], expect, "this kernel (6.18) has them");
    }
}

/// A client that sends and never reads: the server stops reading it once
/// its output is full, so memory stays bounded, and others are served.
fn never_reading_client_is_bounded(backend: &str) {
    const MAX_OUTPUT: u64 = 1 << 20;
    let server = Serve::start(backend, &["--max-output", &MAX_OUTPUT.to_string()]);
    let baseline = server.rss();
    let mut hog = server.connect();
    hog.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let hog_thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let chunk = vec![7u8; 1 << 20];
            let mut written = 0u64;
            while written < 64 << 20 && !stop.load(Ordering::Relaxed) {
                match hog.write(&chunk) {
                    Ok(n) => written += n as u64,
                    Err(_) => break, // timed out: the server pushed back
                }
            }
            (hog, written)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let mut other = server.connect();
    for i in 0..50u32 {
        round_trip(&mut other, &i.to_le_bytes().repeat(25));
    }
    let grown = server.rss().saturating_sub(baseline);
    stop.store(true, Ordering::Relaxed);
    let (hog, written) = hog_thread.join().unwrap();
    drop(hog);
    let (stats, _) = server.stop();
    eprintln!("{backend}: hog wrote {written}, peak output {}, RSS grew {grown}", stats["peak_output_bytes"]);
    assert!(written < 64 << 20, "{backend}: the server never pushed back ({written} bytes written)");
    let peak = stats["peak_output_bytes"].as_u64().unwrap();
    assert!(peak >= MAX_OUTPUT, "{backend}: output never reached its bound ({peak})");
    // With SQPOLL the kernel thread keeps receiving for the connection
    // until it processes the receive's cancellation: what it has put in
    // the provided-buffer ring by then (4 MiB: 1024 x 4 KiB) is delivered.
    let slack = if backend == "uring-sqpoll" { 8 << 20 } else { MAX_OUTPUT };
    assert!(peak <= MAX_OUTPUT + slack, "{backend}: output grew to {peak}, bound {MAX_OUTPUT}");
    assert!(grown < 32 << 20, "{backend}: server RSS grew by {grown} bytes");
}

/// One connection floods; 50 others keep completing round trips.
fn fire_hose_does_not_starve_others(backend: &str) {
    let server = Serve::start(backend, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let flooded = Arc::new(AtomicU64::new(0));
    let mut hose_w = server.connect();
    let mut hose_r = hose_w.try_clone().unwrap();
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let chunk = vec![1u8; 256 << 10];
            while !stop.load(Ordering::Relaxed) {
                if hose_w.write_all(&chunk).is_err() {
                    break;
                }
            }
            hose_w
        })
    };
    let reader = {
        let (stop, flooded) = (stop.clone(), flooded.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while !stop.load(Ordering::Relaxed) {
                match hose_r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => flooded.fetch_add(n as u64, Ordering::Relaxed),
                };
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let clients: Vec<_> = (0..50u64)
        .map(|i| {
            let mut s = server.connect();
            std::thread::spawn(move || {
                for r in 0..20u64 {
                    round_trip(&mut s, &(i * 1000 + r).to_le_bytes().repeat(12));
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a request/response client failed");
    }
    let took = start.elapsed();
    let hose_bytes = flooded.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let hose_w = writer.join().unwrap();
    hose_w.shutdown(Shutdown::Both).ok();
    reader.join().unwrap();
    drop(hose_w);
    server.stop();
    assert!(hose_bytes > 1 << 20, "{backend}: the fire hose barely flowed ({hose_bytes} bytes)");
    assert!(took < Duration::from_secs(20), "{backend}: 1,000 round trips took {took:?} beside the fire hose");
}

/// Out of descriptors: the server backs off (no spinning), keeps serving,
/// and accepts again once descriptors are free.
fn emfile_backs_off_and_recovers(backend: &str) {
    let server = Serve::start(backend, &["--nofile", "48"]);
    let mut first = server.connect();
    round_trip(&mut first, b"before");
    // More connections than the server has descriptors for.
    let mut held: Vec<TcpStream> = (0..80).map(|_| server.connect()).collect();
    std::thread::sleep(Duration::from_millis(1000));
    round_trip(&mut first, b"during: existing connections are still served");
    // Free most of them: the server accepts the rest from its backlog.
    let late: Vec<TcpStream> = held.split_off(60);
    drop(held);
    for (i, mut s) in late.into_iter().enumerate() {
        round_trip(&mut s, format!("late {i}").as_bytes());
    }
    let (stats, _) = server.stop();
    assert!(stats["accept_backoffs"].as_u64().unwrap() >= 1, "{backend}: never hit EMFILE: {stats}");
    // Backing off every 50 ms makes tens of turns a second, not millions.
    let turns = stats["turns"].as_u64().unwrap();
    let wall = stats["wall_s"].as_f64().unwrap();
    assert!((turns as f64) < 2000.0 * wall.max(1.0), "{backend}: {turns} turns in {wall:.1} s: spinning");
}

/// The peer stops sending: everything it sent is still echoed, then EOF.
fn half_close_finishes_output(backend: &str) {
    let server = Serve::start(backend, &[]);
    let mut s = server.connect();
    let data = Rng::new(9).bytes(300_000);
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).expect("read to EOF");
    assert!(back == data, "{backend}: echoed {} of {} bytes, or different ones", back.len(), data.len());
    // Data and FIN together, so they are often both queued before the
    // server reads: the FIN raises no edge of its own then.
    for i in 0..30u8 {
        let mut s = server.connect();
        s.write_all(&[i; 100]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).expect("read to EOF after data+FIN");
        assert_eq!(back, vec![i; 100], "{backend}");
    }
    let (stats, _) = server.stop();
    assert_eq!(stats["closed_abnormally"], 0, "{backend}: {stats}");
}

/// A reset costs the server nothing but that connection.
fn reset_is_survived(backend: &str) {
    let server = Serve::start(backend, &[]);
    let s = server.connect();
    (&s).write_all(&vec![3u8; 2 << 20]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
    drop(s); // RST, with echoed data unread
    std::thread::sleep(Duration::from_millis(100));
    let mut other = server.connect();
    round_trip(&mut other, b"still here");
    drop(other);
    let (stats, _) = server.stop();
    assert!(stats["closed_abnormally"].as_u64().unwrap() >= 1, "{backend}: reset not seen: {stats}");
}

/// SIGTERM while output is queued: it is all delivered, then EOF.
fn graceful_stop_flushes_output(backend: &str) {
    // Room for all of it in the server's output, so none of it is held
    // back by backpressure: megabytes wait in the server when it stops.
    let server = Serve::start(backend, &["--max-output", &(64u32 << 20).to_string()]);
    let mut s = server.connect();
    let data = Rng::new(5).bytes(12 << 20);
    s.write_all(&data).unwrap();
    // The server reads all of it (it cannot send it: we are not reading).
    wait_until_server_read(&s, Duration::from_secs(30));
    let pid = server.pid().to_string();
    std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).expect("read to EOF");
    assert!(back == data, "{backend}: got {} of {} bytes after SIGTERM", back.len(), data.len());
    let (stats, _) = server.stop_after_signal();
    assert_eq!(stats["bytes_out"], data.len() as u64, "{backend}");
}

/// A second SIGTERM while the first one's drain waits for a client that
/// does not read ends the process, as the signal's default would.
fn second_signal_ends_the_drain(backend: &str) {
    // A drain that waits for us longer than the test takes.
    let mut server = Serve::start(backend, &["--max-output", &(64u32 << 20).to_string(), "--drain-timeout", "60"]);
    let s = server.connect();
    // More than the socket buffers hold: the server must wait for us.
    (&s).write_all(&Rng::new(6).bytes(32 << 20)).unwrap();
    wait_until_server_read(&s, Duration::from_secs(30));
    let pid = server.pid().to_string();
    let term = || assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    term();
    // The drain waits for us (we read nothing): still running.
    std::thread::sleep(Duration::from_millis(200));
    let early = server.child.try_wait().unwrap();
    assert!(early.is_none(), "{backend}: ended before the second signal ({early:?})");
    term();
    let stopped = server.wait_after_signal();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(stopped.status.signal(), Some(libc::SIGTERM), "{backend}: {}", stopped.stderr);
    drop(s);
}

/// SIGTERM reaches every loop, idle ones included: four loops with no
/// connection all stop, at once.
fn signal_stops_every_loop(backend: &str) {
    let server = Serve::start(backend, &["--threads", "4"]);
    let started = Instant::now();
    let (stats, _) = server.stop();
    assert_eq!(stats["loops"], 4, "{backend}: {stats}");
    assert!(started.elapsed() < Duration::from_secs(5), "{backend}: took {:?}", started.elapsed());
}

/// --idle-timeout: a connection that sends nothing for that long is
/// closed (EOF, after what it was owed), counted as idle; one that keeps
/// sending is not.
fn idle_connections_are_closed(backend: &str) {
    let server = Serve::start(backend, &["--idle-timeout", "1"]);
    let mut idle = server.connect();
    let mut busy = server.connect();
    round_trip(&mut idle, b"once");
    let last = std::time::Instant::now();
    // The idle one closes about 1 s after its last byte; read its EOF in
    // the background while the busy one sends every 100 ms for 2.5 s.
    let closed_after = std::thread::spawn(move || {
        idle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        idle.read_to_end(&mut rest).expect("EOF from the idle close");
        (rest, last.elapsed())
    });
    while last.elapsed() < Duration::from_millis(2500) {
        round_trip(&mut busy, b"still busy");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (rest, after) = closed_after.join().unwrap();
    assert!(rest.is_empty(), "{backend}: {rest:?}");
    assert!(after >= Duration::from_millis(900) && after < Duration::from_secs(5), "{backend}: closed after {after:?}");
    round_trip(&mut busy, b"and now");
    drop(busy);
    let (stats, _) = server.stop();
    assert_eq!(stats["idle_closed"], 1, "{backend}: {stats}");
    assert_eq!(stats["closed_abnormally"], 0, "{backend}: {stats}");
}

on_every_backend! {
    idle_connections_are_closed,
    echo_integrity,
    never_reading_client_is_bounded,
    fire_hose_does_not_starve_others,
    emfile_backs_off_and_recovers,
    half_close_finishes_output,
    reset_is_survived,
    graceful_stop_flushes_output,
    second_signal_ends_the_drain,
    signal_stops_every_loop,
}

/// A one-loop server on a readiness backend is a one-thread process
/// (io_uring's own kernel threads would count as its tasks): the loop
/// runs on the main thread, and signals need no thread of their own.
#[test]
fn one_loop_is_one_thread() {
    for backend in ["select", "poll", "epoll", "epoll-et"] {
        let server = Serve::start(backend, &[]);
        let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).unwrap().count();
        assert_eq!(tasks, 1, "{backend}: {tasks} threads");
        let mut s = server.connect();
        round_trip(&mut s, b"one thread");
        drop(s);
        server.stop();
    }
}

/// 10,000 idle connections cost the server well under 512 bytes of user
/// memory each, and 10 active ones are served beside them.
fn ten_thousand_idle(backend: &str) {
    let _heavy = heavy();
    let server = Serve::start(backend, &[]);
    let addr = server.addr;
    // Traffic first, so fixed costs (io_uring's buffer ring, allocator
    // arenas) are in the baseline and only per-connection memory is left.
    let LoadRun { report: _, status: warm, output: out } = load(addr, &["--conns", "10", "--requests", "20000"]);
    assert!(warm.success(), "{out}");
    let baseline = server.rss();
    let client = std::thread::spawn(move || {
        load(addr, &["--conns", "10", "--idle", "10000", "--requests", "20000", "--connect-rate", "20000"])
    });
    // Measure while every connection is open: the server has 10,010 fds.
    let deadline = Instant::now() + Duration::from_secs(60);
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", server.pid())).map_or(0, |d| d.count());
    while fds() < 10_010 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let with_idle = server.rss();
    let LoadRun { report, status, output: out } = client.join().unwrap();
    let (stats, _) = server.stop();
    assert!(status.success(), "{backend}: load failed: {out}");
    assert_eq!(report["echoes"], 20_000, "{backend}: {report}");
    assert_eq!(stats["peak_conns"], 10_010, "{backend}");
    assert_eq!(stats["bytes_out"], 40_000 * 100, "{backend}: the server's echoes equal the client's");
    let per_conn = with_idle.saturating_sub(baseline) / 10_010;
    assert!(per_conn <= 512, "{backend}: {per_conn} bytes of RSS per idle connection");
}

#[test]
fn ten_thousand_idle_epoll() {
    ten_thousand_idle("epoll");
}

#[test]
fn ten_thousand_idle_uring() {
    ten_thousand_idle("uring");
}

/// select cannot watch fd 1024: connections beyond it are refused, with
/// an error that says why, and the ones it holds are still served.
#[test]
fn select_refuses_beyond_fd_setsize() {
    let _heavy = heavy();
    let server = Serve::start("select", &[]);
    let LoadRun { report, status, .. } = load(server.addr, &["--conns", "10", "--idle", "1100", "--requests", "1000"]);
    let (stats, stderr) = server.stop();
    assert!(!status.success(), "the refused idle connections are errors for the client");
    assert_eq!(report["echoes"], 1000, "the active connections (accepted first) were served: {report}");
    assert!(stats["refused"].as_u64().unwrap() > 0, "{stats}");
    assert!(stderr.contains("FD_SETSIZE (1024)"), "no reason given: {stderr}");
}

/// The runtime's outbound connections work on every backend: `iomux load`
/// on each client backend against one server.
#[test]
fn load_runs_on_every_client_backend() {
    let server = Serve::start("epoll", &[]);
    let mut total = 0;
    for backend in BACKENDS {
        let LoadRun { report, status, output: out } =
            load(server.addr, &["--backend", backend, "--conns", "20", "--requests", "2000"]);
        assert!(status.success(), "client backend {backend}: {out}");
        assert_eq!(report["echoes"], 2000, "client backend {backend}: {report}");
        total += 2000;
    }
    let (stats, _) = server.stop();
    assert_eq!(stats["bytes_out"], total * 100);
}

#[test]
fn unreachable_server_is_a_clear_error() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let LoadRun { report: _, status, output: out } = load(unused, &["--conns", "3", "--requests", "3"]);
    assert!(!status.success());
    assert!(out.contains("server unreachable") && out.contains("refused"), "{out}");
}

#[test]
fn serve_refuses_bad_input_clearly() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = iomux().args(["serve", "--listen", &taken.local_addr().unwrap().to_string()]).output().unwrap();
    assert!(!busy.status.success());
    assert!(String::from_utf8_lossy(&busy.stderr).contains("address in use"), "{busy:?}");
    let bad = iomux().args(["serve", "--listen", "localhost:99999"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let unknown = iomux().args(["serve", "--backend", "kqueue"]).output().unwrap();
    let text = String::from_utf8_lossy(&unknown.stderr);
    assert!(text.contains("kqueue") && text.contains("epoll-et") && text.contains("uring-sqpoll"), "{text}");
    let idle_http = iomux().args(["serve", "--proto", "http", "--idle-timeout", "5"]).output().unwrap();
    let text = String::from_utf8_lossy(&idle_http.stderr);
    assert!(!idle_http.status.success() && text.contains("--http-idle-timeout"), "{text}");
    let long = iomux().args(["serve", "--keepalive", "40000"]).output().unwrap();
    let text = String::from_utf8_lossy(&long.stderr);
    assert!(long.status.code() == Some(2) && text.contains("--keepalive"), "{text}");
}

/// --threads N: N share-nothing loops on one port (SO_REUSEPORT), all of
/// them serving, their stats merged.
#[test]
fn several_loops_share_one_port() {
    for backend in ["epoll", "uring"] {
        let server = Serve::start(backend, &["--threads", "3"]);
        let LoadRun { report, status, output: out } =
            load(server.addr, &["--conns", "60", "--requests", "6000", "--threads", "2"]);
        let (stats, _) = server.stop();
        assert!(status.success(), "{backend}: {out}");
        assert_eq!(report["echoes"], 6000, "{backend}");
        assert_eq!(stats["loops"], 3, "{backend}: {stats}");
        assert_eq!(stats["accepted"], 60, "{backend}");
        assert_eq!(stats["bytes_out"], 6000 * 100, "{backend}");
    }
}

/// The workers' entries in merged stats, and each one's `key`.
fn per_worker(stats: &serde_json::Value, key: &str) -> Vec<u64> {
    let workers = stats["workers"].as_array().unwrap_or_else(|| panic!("no workers: {stats}"));
    workers.iter().map(|w| w[key].as_u64().unwrap_or_else(|| panic!("no {key} in {w}"))).collect()
}

fn signal(pid: u32, signal: &str) {
    let ok = std::process::Command::new("kill").args([signal, &pid.to_string()]).status().expect("kill");
    assert!(ok.success(), "kill {signal} {pid}");
}

/// --procs 3: three worker processes on one port (SO_REUSEPORT), the
/// connections spread over them, one banner with the parent's pid, and
/// stats merged.
#[test]
fn procs_share_one_port() {
    let server = Serve::start("epoll", &["--procs", "3", "--threads", "2"]);
    let banner = &server.banner;
    assert!(banner.contains(&format!("(pid {}, ", server.pid())), "{banner}");
    assert!(banner.contains("3 procs x 2 threads"), "{banner}");
    let workers = server.children();
    assert_eq!(workers.len(), 3, "{workers:?}");
    // The kernel hashes each connection's 4-tuple over 6 listeners in 3
    // processes: all 60 landing in one process has odds of 3^-59.
    const CONNS: usize = 60;
    let mut sent = 0;
    let mut conns: Vec<TcpStream> = (0..CONNS).map(|_| server.connect()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let message = format!("message {i} ").repeat(i + 1);
        round_trip(c, message.as_bytes());
        sent += message.len() as u64;
    }
    drop(conns);
    let (stats, stderr) = server.stop();
    assert_eq!(stats["procs"], 3, "{stats}");
    assert_eq!(stats["restarts"], 0, "{stats}");
    assert_eq!(stats["loops"], 6, "{stats}");
    assert_eq!(stats["accepted"], CONNS as u64, "{stats}");
    assert_eq!(stats["bytes_out"], sent, "{stats}");
    let accepted = per_worker(&stats, "accepted");
    assert_eq!(accepted.len(), 3, "{stats}");
    assert_eq!(accepted.iter().sum::<u64>(), CONNS as u64, "{accepted:?}");
    assert!(accepted.iter().filter(|&&n| n > 0).count() > 1, "one worker got every connection: {accepted:?}");
    let mut pids = per_worker(&stats, "pid");
    pids.sort_unstable();
    assert_eq!(pids, workers.iter().map(|&p| u64::from(p)).collect::<Vec<_>>());
    assert!(stderr.contains("stopped (3 procs). 60 connections accepted"), "{stderr}");
}

/// A worker killed with SIGKILL is reported and restarted under the same
/// number; the server keeps serving, and its exit status says a worker
/// died.
#[test]
fn procs_restart_a_killed_worker() {
    let server = Serve::start("epoll", &["--procs", "3"]);
    let workers = server.children();
    assert_eq!(workers.len(), 3, "{workers:?}");
    let victim = workers[1];
    signal(victim, "-KILL");
    assert!(server.wait_for_stderr("restarted", Duration::from_secs(10)), "no restart: {}", server.stderr_now());
    let said = server.stderr_now();
    assert!(said.contains(&format!("(pid {victim}) was killed by signal 9 (SIGKILL); restarting")), "{said}");
    let now = server.children();
    assert_eq!(now.len(), 3, "{now:?}");
    assert!(!now.contains(&victim), "{now:?}");
    for i in 0..30u32 {
        round_trip(&mut server.connect(), format!("after the restart {i}").as_bytes());
    }
    signal(server.pid(), "-TERM");
    let Stopped { status, stats, stderr } = server.wait_after_signal();
    assert_eq!(status.code(), Some(3), "{stderr}");
    let stats = stats.unwrap_or_else(|| panic!("no stats: {stderr}"));
    assert_eq!(stats["restarts"], 1, "{stats}");
    assert_eq!(stats["accepted"], 30, "{stats}");
    assert_eq!(per_worker(&stats, "accepted").len(), 3, "{stats}");
    assert_eq!(stats["lost"][0]["pid"], victim, "the killed worker's figures are gone: {stats}");
}

/// SIGTERM to the parent reaches every worker, and each drains: every
/// client gets all of its echo, then EOF; the parent merges the stats.
#[test]
fn procs_drain_on_sigterm() {
    let max_output = (64u32 << 20).to_string();
    let server = Serve::start("epoll", &["--procs", "3", "--max-output", &max_output, "--drain-timeout", "30"]);
    let workers = server.children();
    // Not reading: the echoes wait in the workers when the signal comes.
    // 60 connections over 3 workers leave one without any at odds of
    // 3 x (2/3)^60, about 1 in 10^10.
    const CONNS: usize = 60;
    let data = Rng::new(11).bytes(512 << 10);
    let mut conns: Vec<TcpStream> = (0..CONNS)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(&data).expect("write");
            s
        })
        .collect();
    for s in &conns {
        wait_until_server_read(s, Duration::from_secs(30));
    }
    signal(server.pid(), "-TERM");
    for (i, s) in conns.iter_mut().enumerate() {
        let mut back = Vec::new();
        s.read_to_end(&mut back).expect("read to EOF");
        assert!(back == data, "connection {i}: got {} of {} bytes after SIGTERM", back.len(), data.len());
    }
    let (stats, _) = server.stop_after_signal();
    assert_eq!(stats["procs"], 3, "{stats}");
    assert_eq!(stats["bytes_out"], (CONNS * data.len()) as u64, "{stats}");
    let bytes_out = per_worker(&stats, "bytes_out");
    assert!(bytes_out.len() == 3 && bytes_out.iter().all(|&n| n > 0), "every worker drained: {bytes_out:?}");
    for pid in workers {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "worker {pid} still there");
    }
}

/// Bad input is refused before any worker starts.
#[test]
fn procs_refuse_bad_input() {
    let zero = iomux().args(["serve", "--procs", "0"]).output().unwrap();
    assert_eq!(zero.status.code(), Some(2), "{zero:?}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let busy = iomux().args(["serve", "--procs", "2", "--listen", &addr]).output().unwrap();
    let said = String::from_utf8_lossy(&busy.stderr);
    assert_eq!(busy.status.code(), Some(1), "{said}");
    assert!(said.contains("address in use") && !said.contains("[worker"), "{said}");
    // A server already listening with SO_REUSEPORT would let a second one
    // join its group and share its connections: refused too.
    let first = Serve::start("epoll", &["--procs", "2"]);
    let second = iomux().args(["serve", "--procs", "2", "--listen", &first.addr.to_string()]).output().unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{said}");
    assert!(said.contains("already listens"), "{said}");
    first.stop();
}

/// The io_uring feature flags reach the loops, and the stats say, per
/// feature, what was asked for and what the kernel gave; with
/// `--procs`, the workers' report is merged.
fn uring_feature_flags_reach_the_stats(backend: &str, procs: &str) {
    let server = Serve::start(
        backend,
        &[
            "--procs",
            procs,
            "--uring-register-ring",
            "off",
            "--uring-min-wait-us",
            "100",
            "--uring-bundle",
            "on",
            "--uring-buf-inc",
            "off",
            "--uring-send-zc-min",
            "4096",
        ],
    );
    let mut s = server.connect();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    round_trip(&mut s, &data);
    drop(s);
    let (stats, _) = server.stop();
    let f = &stats["uring_features"];
    for (name, requested) in
        [("register_ring", false), ("min_wait", true), ("bundle", true), ("buf_inc", false), ("send_zc", true)]
    {
        assert_eq!(f[name]["requested"], requested, "{backend} {name}: {stats}");
        // This kernel (6.18) has every feature.
        assert_eq!(f[name]["active"], requested, "{backend} {name}: {stats}");
        assert!(f[name]["why_not"].is_null(), "{backend} {name}: {stats}");
    }
    assert!(stats["zero_copy_sends"].as_u64().unwrap() > 0, "{backend}: a 300 KB echo makes large writes: {stats}");
    assert_eq!(stats["bytes_out"], data.len() as u64, "{backend}: {stats}");
}

#[test]
fn uring_feature_flags_reach_the_stats_uring() {
    uring_feature_flags_reach_the_stats("uring", "1");
}

#[test]
fn uring_feature_flags_reach_the_stats_uring_sqpoll() {
    uring_feature_flags_reach_the_stats("uring-sqpoll", "2");
}

/// Readiness backends have no io_uring features to report.
#[test]
fn readiness_backends_report_no_uring_features() {
    let server = Serve::start("epoll", &[]);
    let (stats, _) = server.stop();
    assert!(stats["uring_features"].is_null(), "{stats}");
}
