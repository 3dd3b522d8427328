//! Hostile inputs (issue 8), each tried on every backend where it applies:
//! TCP urgent data under edge triggering, `--max-conns` under a burst of
//! connects, accept back-off that must not spin (the SQPOLL kernel thread
//! included) while descriptors are exhausted, output paths checked before
//! any work starts, "listening" printed only once the server is ready, and
//! `--max-conns 0` refused.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use support::*;

/// What a command said and how it ended; `status` is None when it was
/// still running at its time limit (and was killed then).
struct Finished {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Finished {
    /// It ended by itself, unsuccessfully.
    fn failed(&self) -> bool {
        self.status.is_some_and(|s| !s.success())
    }
}

/// Runs `cmd` for at most `limit`, then kills it.
fn run_within(cmd: &mut Command, limit: Duration) -> Finished {
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn iomux");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Finished { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

/// A fresh path under the temporary folder, unique to this test process.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("iomux-hostile-{}-{name}", std::process::id()))
}

/// A regular file under the temporary folder, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let path = temp_path(name);
        std::fs::write(&path, b"a regular file").expect("temp file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Reads until `want` bytes arrived or `limit` passed; returns what came
/// and, when it is short, why.
fn read_for(s: &mut TcpStream, want: usize, limit: Duration) -> (Vec<u8>, &'static str) {
    let deadline = Instant::now() + limit;
    let mut got = vec![0u8; want];
    let mut n = 0;
    let mut why = "";
    while n < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            why = "nothing more came";
            break;
        }
        s.set_read_timeout(Some(left)).expect("read timeout");
        match s.read(&mut got[n..]) {
            Ok(0) => {
                why = "the server closed the connection";
                break;
            }
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                why = "nothing more came";
                break;
            }
            Err(e) => panic!("read: {e}"),
        }
    }
    got.truncate(n);
    (got, why)
}

/// `before`, one byte of TCP urgent data, `after`: the echo is exactly
/// `before!after` (the runtime sets SO_OOBINLINE, as RFC 6093 recommends:
/// the urgent byte stays in the stream, in order; `recv` still stops short
/// at its mark, with `after` queued behind it), and it comes without the
/// client sending anything more.
fn urgent_data_never_stalls(backend: &str) {
    let server = Serve::start(backend, &["--proto", "echo"]);
    // Timing decides what the server sees in one read: the three sends
    // back to back (epoll-et stalls), or with 20 ms pauses before and/or
    // after the urgent byte, so that it sometimes arrives on its own
    // (a multishot receive under SQPOLL stalled in about 1 of 100 such
    // rounds before the runtime watched for urgent data: hence 100).
    const ROUNDS: u32 = 100;
    for round in 0..ROUNDS {
        let ms = |on: bool| Duration::from_millis(if on { 20 } else { 0 });
        let (pause_before, pause_after) = (ms(round % 4 == 1 || round % 4 == 3), ms(round % 4 >= 2));
        let mut s = server.connect();
        s.set_nodelay(true).expect("TCP_NODELAY"); // separate segments
        s.write_all(b"before").expect("write");
        std::thread::sleep(pause_before);
        let urgent = b'!';
        // SAFETY: the fd is open (borrowed from `s` for the call) and the
        // buffer is one valid byte.
        let sent = unsafe { libc::send(s.as_raw_fd(), (&urgent as *const u8).cast(), 1, libc::MSG_OOB) };
        assert_eq!(sent, 1, "send(MSG_OOB): {}", std::io::Error::last_os_error());
        std::thread::sleep(pause_after);
        s.write_all(b"after").expect("write");
        let (echoed, why) = read_for(&mut s, b"before!after".len(), Duration::from_secs(2));
        assert!(
            echoed == b"before!after",
            "{backend}, round {round} (pauses {pause_before:?}, {pause_after:?}): echoed {:?}, not \"before!after\", and then {why} \
             within 2 s (the urgent byte is inline; the rest was left unread)",
            String::from_utf8_lossy(&echoed)
        );
    }
    let (stats, _) = server.stop();
    assert_eq!(stats["bytes_out"], u64::from(ROUNDS) * 12, "{backend}: {stats}");
}

/// The process's open sockets, from /proc.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/<pid>/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// `--max-conns 10` and 200 connects at once: never more than 10 open at
/// a time, and none of the others lost: each is served once earlier ones
/// close.
fn max_conns_holds_under_a_burst(backend: &str) {
    const LIMIT: usize = 10;
    const CLIENTS: usize = 200;
    raise_fd_limit();
    let server = Serve::start(backend, &["--max-conns", &LIMIT.to_string()]);
    // The server's own sockets (listener, signal pipe) before any client.
    let own = sockets(server.pid());
    // Loopback connects complete in the kernel (the listener's backlog)
    // whether or not the server accepts: this is a burst of 200.
    let mut clients: Vec<Option<TcpStream>> = (0..CLIENTS).map(|_| Some(server.connect())).collect();
    std::thread::sleep(Duration::from_millis(300));
    let held = sockets(server.pid()).saturating_sub(own);
    // Each sends its number; a client is served when it comes back, and
    // then it leaves, making room for the next.
    for (i, c) in clients.iter_mut().enumerate() {
        let s = c.as_mut().unwrap();
        s.write_all(&[i as u8]).expect("write");
        s.set_nonblocking(true).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut served = 0;
    while served < CLIENTS && Instant::now() < deadline {
        for (i, c) in clients.iter_mut().enumerate() {
            let Some(s) = c else { continue };
            let mut byte = [0u8];
            match s.read(&mut byte) {
                Ok(1) => {
                    assert_eq!(byte[0], i as u8, "{backend}: client {i} got another's byte");
                    *c = None;
                    served += 1;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                other => panic!("{backend}: client {i} was dropped unserved: {other:?}"),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let (stats, _) = server.stop();
    assert!(
        held <= LIMIT,
        "{backend}: {held} connections open at once 300 ms into the burst, limit {LIMIT}; peak_conns {}",
        stats["peak_conns"]
    );
    assert!(stats["peak_conns"].as_u64().unwrap() <= LIMIT as u64, "{backend}: over the limit {LIMIT}: {stats}");
    assert_eq!(served, CLIENTS, "{backend}: only {served} of {CLIENTS} clients served within 10 s");
    assert_eq!(stats["accepted"], CLIENTS as u64, "{backend}: {stats}");
    assert_eq!(stats["bytes_out"], CLIENTS as u64, "{backend}: {stats}");
}

/// CPU time (user + system) in clock ticks from a /proc `stat` file:
/// fields 14 and 15, counted after the command name's closing bracket.
fn cpu_ticks(stat_path: &str) -> u64 {
    let text = std::fs::read_to_string(stat_path).unwrap_or_else(|e| panic!("{stat_path}: {e}"));
    let fields: Vec<&str> = text[text.rfind(')').expect("stat") + 2..].split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The io_uring SQPOLL kernel threads (`iou-sqp-<pid>`) of process `pid`.
fn sq_threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("/proc/<pid>/task")
        .filter_map(|e| {
            let task = e.ok()?.path();
            let comm = std::fs::read_to_string(task.join("comm")).ok()?;
            comm.starts_with("iou-sqp").then(|| task.join("stat").to_string_lossy().into_owned())
        })
        .collect()
}

/// A server with 64 descriptors and 200 clients: accepting fails with
/// EMFILE and must back off, costing next to no CPU, neither in the server
/// nor in its SQPOLL kernel thread; once the clients leave, new ones are
/// served.
fn emfile_backoff_does_not_spin(backend: &str) {
    // Each backend, healthy, measures 0-1 % here (a retry every 50 ms).
    // A spinning loop or SQ thread shows 50-100 %, even on a busy machine.
    const MAX_CPU_SHARE: f64 = 0.10;
    raise_fd_limit();
    let server = Serve::start(backend, &["--nofile", "64"]);
    let pid = server.pid();
    let held: Vec<TcpStream> = (0..200).map(|_| server.connect()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let sqp = sq_threads(pid);
    if backend == "uring-sqpoll" {
        assert!(!sqp.is_empty(), "{backend}: no iou-sqp-* thread under /proc/{pid}/task");
    }
    let process = format!("/proc/{pid}/stat");
    let sq_ticks = || sqp.iter().map(|p| cpu_ticks(p)).sum::<u64>();
    let (p0, s0, t0) = (cpu_ticks(&process), sq_ticks(), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (p1, s1, wall) = (cpu_ticks(&process), sq_ticks(), t0.elapsed().as_secs_f64());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let share = |ticks: u64| ticks as f64 / hz / wall;
    let (process_share, sq_share) = (share(p1 - p0), share(s1 - s0));
    eprintln!("{backend}: out of fds, server CPU {process_share:.3}, SQ thread {sq_share:.3} of a CPU");
    assert!(sq_share < MAX_CPU_SHARE, "{backend}: the SQPOLL thread spins at {sq_share:.2} of a CPU while out of fds");
    assert!(process_share < MAX_CPU_SHARE, "{backend}: the server spins at {process_share:.2} of a CPU out of fds");
    drop(held);
    let mut fresh = server.connect();
    fresh.write_all(b"after the flood").expect("write");
    let (echoed, why) = read_for(&mut fresh, 15, Duration::from_secs(5));
    assert!(echoed == b"after the flood", "{backend}: a new client was not served once fds were free: {why}");
    let (stats, _) = server.stop();
    assert!(stats["accept_backoffs"].as_u64().unwrap() >= 1, "{backend}: never ran out of fds: {stats}");
}

/// `iomux serve` on `backend`, any free port.
fn serve_cmd(backend: &str) -> Command {
    let mut cmd = iomux();
    cmd.args(["serve", "--backend", backend, "--listen", "127.0.0.1:0"]);
    cmd
}

/// The server fails to set up: it exits with the reason, naming it with
/// `reason` (lower case), and never said "listening".
#[track_caller]
fn assert_set_up_fails(backend: &str, cmd: &mut Command, reason: &[&str]) {
    let r = run_within(cmd, Duration::from_secs(5));
    assert!(r.failed(), "{backend}: serve did not fail ({:?}): {}", r.status, r.stderr);
    let said = r.stderr.to_lowercase();
    assert!(reason.iter().all(|w| said.contains(w)), "{backend}: no reason ({reason:?}) given: {}", r.stderr);
    assert!(!r.stdout.contains("listening"), "{backend}: said {:?} before failing: {}", r.stdout, r.stderr);
}

/// "listening" is printed once every set-up step succeeded: a client
/// connecting right after it is served; and a server whose loop cannot
/// have its descriptors (0-2 and the listener fit in 4; the poller or the
/// waker do not) exits with the reason, never having said "listening".
fn listening_means_ready(backend: &str) {
    let server = Serve::start(backend, &[]);
    let mut s = server.connect();
    s.write_all(b"right away").expect("write");
    let (echoed, why) = read_for(&mut s, 10, Duration::from_secs(2));
    assert!(echoed == b"right away", "{backend}: not served right after \"listening\": {why}");
    drop(s);
    server.stop();
    assert_set_up_fails(backend, serve_cmd(backend).args(["--nofile", "4"]), &["too many open files"]);
}

/// io_uring cannot have its buffer ring: 32768 x 1 MiB of receive buffers
/// is a 32 GiB mapping, refused here (24 GiB of memory, no swap) and on
/// any machine under the 4 GiB address-space limit set for the server.
fn failed_buffer_ring_never_says_listening(backend: &str) {
    let mut cmd = serve_cmd(backend);
    cmd.args(["--ring-buffers", "32768", "--ring-buffer-size", "1048576"]);
    // SAFETY: between fork and exec the closure only calls setrlimit,
    // which is async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: 4 << 30, rlim_max: 4 << 30 };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        })
    };
    assert_set_up_fails(backend, &mut cmd, &["buf", "memory"]);
}

#[test]
fn failed_buffer_ring_never_says_listening_uring() {
    failed_buffer_ring_never_says_listening("uring");
}

#[test]
fn failed_buffer_ring_never_says_listening_uring_sqpoll() {
    failed_buffer_ring_never_says_listening("uring-sqpoll");
}

on_every_backend! {
    max_conns_holds_under_a_burst,
    emfile_backoff_does_not_spin,
    listening_means_ready,
}

/// On uring-sqpoll the kernel's multishot receive can stall at the
/// urgent mark (about 1 round in 100 here, reproduced outside iomux by
/// `crates/repro`'s sqpoll-urgent: docs/notes/sqpoll-urgent.md); under
/// SQPOLL the runtime receives with one-shot receives, which never stall
/// there, so every backend passes every round.
mod urgent_data_never_stalls {
    #[test]
    fn select() {
        super::urgent_data_never_stalls("select")
    }
    #[test]
    fn poll() {
        super::urgent_data_never_stalls("poll")
    }
    #[test]
    fn epoll() {
        super::urgent_data_never_stalls("epoll")
    }
    #[test]
    fn epoll_et() {
        super::urgent_data_never_stalls("epoll-et")
    }
    #[test]
    fn uring() {
        super::urgent_data_never_stalls("uring")
    }
    #[test]
    fn uring_sqpoll() {
        super::urgent_data_never_stalls("uring-sqpoll")
    }
}

/// Paths no output can be written to (under a missing folder, under a
/// regular file, a folder itself), each with the reason to be given.
fn bad_output_paths(file: &TempFile) -> [(PathBuf, &'static str); 3] {
    [
        (temp_path("missing").join("out.json"), "no such file or directory"),
        (file.0.join("out.json"), "not a directory"),
        (std::env::temp_dir(), "is a directory"),
    ]
}

/// `cmd`, told to write to `path`, fails within 2 s, and its error names
/// the path and the reason (lower case).
#[track_caller]
fn assert_refused(cmd: &mut Command, path: &Path, reason: &str) -> Finished {
    let r = run_within(cmd, Duration::from_secs(2));
    let shown = path.display().to_string();
    assert!(r.failed(), "{shown}: did not fail within 2 s ({:?}): {}\n{}", r.status, r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&shown) && r.stderr.to_lowercase().contains(reason),
        "{shown}: the error names neither the path nor the reason ({reason}): {}",
        r.stderr
    );
    r
}

#[test]
fn serve_stats_file_checked_before_serving() {
    let file = TempFile::new("serve-file");
    for (path, reason) in bad_output_paths(&file) {
        let r = assert_refused(serve_cmd("epoll").arg("--stats-file").arg(&path), &path, reason);
        assert!(!r.stdout.contains("listening"), "--stats-file {}: it started serving: {}", path.display(), r.stdout);
    }
}

#[test]
fn load_json_checked_before_the_load() {
    let server = Serve::start("epoll", &[]);
    let file = TempFile::new("load-file");
    for (path, reason) in bad_output_paths(&file) {
        let mut cmd = iomux();
        cmd.args(["load", "--connect", &server.addr.to_string(), "--conns", "5", "--duration", "30", "--json"]);
        assert_refused(cmd.arg(&path), &path, reason);
    }
    let (stats, _) = server.stop();
    assert_eq!(stats["accepted"], 0, "a load with nowhere to write its figures connected anyway: {stats}");
}

#[test]
fn bench_out_checked_before_the_experiments() {
    let file = TempFile::new("bench-file");
    let out = file.0.join("sub");
    assert_refused(iomux().args(["bench", "syscall-rate", "--quick", "--out"]).arg(&out), &out, "not a directory");
}

#[test]
fn report_of_a_missing_folder_says_so() {
    let dir = temp_path("no-such-results");
    assert_refused(iomux().arg("report").arg(&dir), &dir, "no such file or directory");
}

#[test]
fn max_conns_zero_is_refused() {
    for backend in BACKENDS {
        let r = run_within(serve_cmd(backend).args(["--max-conns", "0"]), Duration::from_secs(2));
        assert_eq!(r.status.and_then(|s| s.code()), Some(2), "{backend}: --max-conns 0 not refused: {}", r.stdout);
        assert!(r.stderr.contains("at least 1"), "{backend}: no reason given: {}", r.stderr);
        assert!(!r.stdout.contains("listening"), "{backend}: {}", r.stdout);
    }
}
