//! Shared by the integration tests: an `iomux serve` child process, a tiny
//! PRNG, and a lock for tests that need many descriptors at once.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

pub const BACKENDS: [&str; 6] = ["select", "poll", "epoll", "epoll-et", "uring", "uring-sqpoll"];

/// `on_every_backend! { f, g }`: a module per function, with one `#[test]`
/// per backend calling `f("select")`, `f("poll")`, ... (the names in
/// [`BACKENDS`]).
#[macro_export]
macro_rules! on_every_backend {
    ($($test:ident),+ $(,)?) => {$(
        mod $test {
            #[test] fn select() { super::$test("select") }
            #[test] fn poll() { super::$test("poll") }
            #[test] fn epoll() { super::$test("epoll") }
            #[test] fn epoll_et() { super::$test("epoll-et") }
            #[test] fn uring() { super::$test("uring") }
            #[test] fn uring_sqpoll() { super::$test("uring-sqpoll") }
        }
    )+};
}

/// Tests that hold thousands of sockets take turns (the fd limit is per
/// process, and ephemeral ports are per machine).
pub fn heavy() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

static CPU: RwLock<()> = RwLock::new(());

/// A test that measures a server (its memory here) runs while none of the
/// CPU-heavy tests of its binary does (they take [`busy`]): six servers
/// and their clients on two CPUs slow every reader, and a subscriber slowed
/// past the broker's stall mark (50 ms without progress) is then treated
/// as stalled, its queue growing: once 65.8 MiB under CI's load, against
/// 53-58 alone.
#[allow(dead_code)] // not every test binary measures
pub fn measuring() -> RwLockWriteGuard<'static, ()> {
    CPU.write().unwrap_or_else(|e| e.into_inner())
}

/// A CPU-heavy test: it runs beside others of its kind, never beside one
/// that is [`measuring`].
#[allow(dead_code)]
pub fn busy() -> RwLockReadGuard<'static, ()> {
    CPU.read().unwrap_or_else(|e| e.into_inner())
}

pub fn iomux() -> Command {
    let mut iomux = Command::new(env!("CARGO_BIN_EXE_iomux"));
    // Tests never install packages: CI's script does, before them.
    iomux.env("IOMUX_NO_INSTALL", "1");
    iomux
}

/// A running `iomux serve`.
pub struct Serve {
    pub child: Child,
    pub addr: SocketAddr,
    /// The line that said it was listening.
    pub banner: String,
    stats: PathBuf,
    /// Its stderr so far, read as it comes (so that a chatty server never
    /// blocks on a full pipe, and a test can wait for a line).
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

/// How a stopped `iomux serve` ended.
pub struct Stopped {
    pub status: std::process::ExitStatus,
    /// Its stats file, if it wrote one.
    pub stats: Option<serde_json::Value>,
    pub stderr: String,
}

impl Serve {
    pub fn start(backend: &str, extra: &[&str]) -> Serve {
        let stats =
            std::env::temp_dir().join(format!("iomux-stats-{}-{backend}-{}.json", std::process::id(), next_id()));
        let mut child = iomux()
            .args(["serve", "--backend", backend, "--listen", "127.0.0.1:0", "--stats-file"])
            .arg(&stats)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn iomux serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read banner");
        let addr = line
            .split_whitespace()
            .find_map(|w| w.parse::<SocketAddr>().ok())
            .unwrap_or_else(|| panic!("{backend}: no address in banner {line:?}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (pipe, text) = (child.stderr.take().expect("stderr"), stderr.clone());
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut text = text.lock().unwrap_or_else(|e| e.into_inner());
                text.push_str(&line);
                text.push('\n');
            }
        });
        Serve { child, addr, banner: line, stats, stderr, stderr_reader: Some(stderr_reader) }
    }

    /// What the server has written on stderr so far.
    pub fn stderr_now(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to `limit` for `needle` on the server's stderr.
    pub fn wait_for_stderr(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.stderr_now().contains(needle) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// The processes the server started (its workers, with --procs), from
    /// the parent pid field of /proc/*/stat.
    pub fn children(&self) -> Vec<u32> {
        let parent = self.pid().to_string();
        let mut pids: Vec<u32> = std::fs::read_dir("/proc")
            .expect("read /proc")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
                after_comm.split_whitespace().nth(1) == Some(parent.as_str())
            })
            .collect();
        pids.sort_unstable();
        pids
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        s
    }

    /// Resident memory of the server now, in bytes.
    pub fn rss(&self) -> u64 {
        rss_of(self.pid()).expect("VmRSS")
    }

    /// SIGTERM, then the exit status must be 0; returns the stats and stderr.
    pub fn stop(self) -> (serde_json::Value, String) {
        let ok = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().expect("kill");
        assert!(ok.success());
        self.stop_after_signal()
    }

    /// Waits for a server that was already sent SIGTERM; the exit status
    /// must be 0.
    pub fn stop_after_signal(self) -> (serde_json::Value, String) {
        let Stopped { status, stats, stderr } = self.wait_after_signal();
        assert!(status.success(), "serve exited with {status}: {stderr}");
        (stats.unwrap_or_else(|| panic!("no stats file; stderr: {stderr}")), stderr)
    }

    /// Waits for a server that was already sent SIGTERM, whatever its
    /// exit status.
    pub fn wait_after_signal(mut self) -> Stopped {
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("iomux serve did not stop within 30 s of SIGTERM: {}", self.stderr_now());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        let stderr = self.stderr_now();
        let stats = std::fs::read_to_string(&self.stats).ok().map(|text| {
            std::fs::remove_file(&self.stats).ok();
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("stats json: {e}; stderr: {stderr}"))
        });
        Stopped { status, stats, stderr }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    N.fetch_add(1, Ordering::Relaxed)
}

/// xorshift64*: deterministic test data without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Log-uniform in [1, max]: mostly small, sometimes large.
    pub fn size(&mut self, max: usize) -> usize {
        let bits = (max as f64).log2();
        let x = (self.below(1 << 20) as f64 / (1u64 << 20) as f64) * bits;
        (2f64.powf(x) as usize).clamp(1, max)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

/// One echo round trip of `data`; the echo must equal it.
pub fn round_trip(s: &mut TcpStream, data: &[u8]) {
    s.write_all(data).expect("write");
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back).expect("read echo");
    assert!(back == data, "echo differs from what was sent");
}

pub fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    lim.current = lim.maximum;
    setrlimit(Resource::Nofile, lim).expect("raise RLIMIT_NOFILE");
}

/// Runs `iomux load` to completion against `addr`; returns its JSON report
/// and exit status.
/// What a finished `iomux load` said: its JSON report, exit status, and
/// its stdout and stderr together.
pub struct LoadRun {
    pub report: serde_json::Value,
    pub status: std::process::ExitStatus,
    pub output: String,
}

pub fn load(addr: std::net::SocketAddr, args: &[&str]) -> LoadRun {
    let json = std::env::temp_dir().join(format!("iomux-load-{}-{}.json", std::process::id(), addr.port()));
    let out = iomux()
        .args(["load", "--connect", &addr.to_string(), "--json"])
        .arg(&json)
        .args(args)
        .output()
        .expect("run iomux load");
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    std::fs::remove_file(&json).ok();
    let output = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    LoadRun { report: serde_json::from_str(&text).unwrap_or(serde_json::Value::Null), status: out.status, output }
}

/// The send and receive queues (bytes) of the TCP socket from `local` to
/// `remote`, as /proc/net/tcp shows them; None when there is none.
fn tcp_queues(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Option<(u64, u64)> {
    let hex = |a: std::net::SocketAddr| match a {
        std::net::SocketAddr::V4(v4) => format!("{:08X}:{:04X}", u32::from_le_bytes(v4.ip().octets()), v4.port()),
        std::net::SocketAddr::V6(_) => String::new(),
    };
    let (local, remote) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) != Some(&local.as_str()) || f.get(2) != Some(&remote.as_str()) {
            return None;
        }
        let (tx, rx) = f.get(4)?.split_once(':')?;
        Some((u64::from_str_radix(tx, 16).ok()?, u64::from_str_radix(rx, 16).ok()?))
    })
}

/// Waits until the server has read everything sent on `s`: nothing is
/// left unsent or unacknowledged on our side, nothing unread on the
/// server's. Panics after `limit`.
pub fn wait_until_server_read(s: &TcpStream, limit: Duration) {
    let (ours, theirs) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
    let deadline = Instant::now() + limit;
    loop {
        let sent = tcp_queues(ours, theirs).map(|q| q.0);
        let unread = tcp_queues(theirs, ours).map(|q| q.1);
        if sent == Some(0) && unread == Some(0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not read all we sent within {limit:?} (ours unsent: {sent:?}, its unread: {unread:?})"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// redis-server on a free port, stopped when dropped.
pub struct Redis {
    child: Child,
    pub addr: SocketAddr,
}

impl Redis {
    /// A port found free may be taken by another test's server before
    /// redis-server binds it: then redis-server exits, or the port answers
    /// for another process. So it counts as started only when INFO names
    /// this child's pid; else it is tried again on another port.
    pub fn start() -> Option<Redis> {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--io-threads", "1", "--daemonize", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let Ok(child) = child else {
                assert!(
                    std::env::var("CI").is_err(),
                    "CI=true but redis-server is missing (scripts/install-http-tools)"
                );
                eprintln!("skipped: no redis-server (scripts/install-http-tools installs it)");
                return None;
            };
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let mut redis = Redis { child, addr };
            if redis.answers_as_itself() {
                return Some(redis);
            }
        }
        panic!("redis-server did not start on a free port in 5 tries");
    }

    /// Waits (up to 10 s) until this child answers on its port; false
    /// when it exited (its port was taken) or another process answers.
    fn answers_as_itself(&mut self) -> bool {
        let start = Instant::now();
        let pid = format!("process_id:{}", self.child.id());
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut s) = TcpStream::connect(self.addr) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut info = Vec::new();
                if s.write_all(b"INFO server\r\nQUIT\r\n").is_ok() && s.read_to_end(&mut info).is_ok() {
                    return String::from_utf8_lossy(&info).lines().any(|l| l.trim() == pid);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------ RESP replies

/// The length of the one reply at the start of `b`, None while incomplete.
pub fn reply_len(b: &[u8]) -> Option<usize> {
    let line_end = b.windows(2).position(|w| w == b"\r\n")?;
    let number = || std::str::from_utf8(&b[1..line_end]).ok()?.parse::<i64>().ok();
    match b.first()? {
        b'+' | b'-' | b':' => Some(line_end + 2),
        b'$' => match number()? {
            n if n < 0 => Some(line_end + 2),
            n => (b.len() >= line_end + 2 + n as usize + 2).then_some(line_end + 2 + n as usize + 2),
        },
        b'*' => {
            let mut at = line_end + 2;
            for _ in 0..number()?.max(0) {
                at += reply_len(&b[at..])?;
            }
            Some(at)
        }
        other => panic!("not a RESP reply: {:?}", *other as char),
    }
}

/// Reads until `n` whole replies have come; they, as bytes.
pub fn read_replies(s: &mut TcpStream, n: usize, what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64 << 10];
    loop {
        let (mut at, mut count) = (0, 0);
        while count < n {
            match reply_len(&got[at..]) {
                Some(len) => (at, count) = (at + len, count + 1),
                None => break,
            }
        }
        if count == n {
            return got;
        }
        match s.read(&mut buf) {
            Ok(0) => panic!("{what}: closed after {count} of {n} replies: {:?}", String::from_utf8_lossy(&got)),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("{what}: after {count} of {n} replies: {e}: {:?}", String::from_utf8_lossy(&got)),
        }
    }
}

// ------------------------------------------------------------ memory

/// A process's resident memory (VmRSS), None once it has gone.
pub fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim();
    Some(kib.parse::<u64>().ok()? * 1024)
}

/// Samples a process's RSS every 20 ms on a thread of its own until
/// [`PeakRss::stop`], which returns the largest seen.
pub struct PeakRss {
    done: Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl PeakRss {
    pub fn start(pid: u32) -> PeakRss {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            while !d.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(rss_of(pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        PeakRss { done, sampler }
    }

    pub fn stop(self) -> u64 {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        self.sampler.join().expect("the RSS sampler")
    }
}
