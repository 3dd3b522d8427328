//! What the runtime tests share: an in-process server or client runtime
//! on its own thread, bounded in time; std clients with timeouts; a byte
//! pattern that shows any loss, duplication or reordering; close reasons
//! as plain values.

#![allow(dead_code)] // each test crate uses part of it

/// Each test function, once per backend: `partial_consumption::epoll_et`.
/// Attributes before a name (`#[ignore = "..."]`) go on its six tests.
#[allow(unused_macros)] // not every test crate runs per backend
macro_rules! on_every_backend {
    ($($(#[$attr:meta])* $test:ident),+ $(,)?) => {$(
        mod $test {
            use iomux::Backend;
            $(#[$attr])* #[test] fn select() { super::$test(Backend::Select) }
            $(#[$attr])* #[test] fn poll() { super::$test(Backend::Poll) }
            $(#[$attr])* #[test] fn epoll() { super::$test(Backend::Epoll) }
            $(#[$attr])* #[test] fn epoll_et() { super::$test(Backend::EpollEt) }
            $(#[$attr])* #[test] fn uring() { super::$test(Backend::Uring) }
            $(#[$attr])* #[test] fn uring_sqpoll() { super::$test(Backend::UringSqpoll) }
        }
    )+};
}

use iomux::runtime::{CloseReason, Config, ConnId, Control, Finished, Handler, Io, Runtime};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The longest any single wait of a test may take (a loaded 2-core
/// machine included); past it the test fails instead of hanging.
pub const LIMIT: Duration = Duration::from_secs(8);

/// A close reason as a comparable value (`CloseReason` holds io::Errors).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    PeerClosed,
    Local,
    Reset,
    Shutdown,
    /// The errno of the failed connect.
    ConnectFailed(Option<i32>),
    /// The syscall and errno.
    Error(&'static str, Option<i32>),
    InputLimit,
    ConnectTimeout,
    Aborted,
    Other(String),
}

impl From<&CloseReason> for Reason {
    fn from(r: &CloseReason) -> Reason {
        match r {
            CloseReason::PeerClosed => Reason::PeerClosed,
            CloseReason::Local => Reason::Local,
            CloseReason::Reset => Reason::Reset,
            CloseReason::Shutdown => Reason::Shutdown,
            CloseReason::ConnectFailed(e) => Reason::ConnectFailed(e.raw_os_error()),
            CloseReason::Error(e) => Reason::Error(e.syscall().map_or("none", |s| s.name()), e.raw_os_error()),
            CloseReason::InputLimit => Reason::InputLimit,
            CloseReason::ConnectTimeout => Reason::ConnectTimeout,
            CloseReason::Aborted => Reason::Aborted,
            other => Reason::Other(format!("{other:?}")),
        }
    }
}

/// A runtime serving on 127.0.0.1 from its own thread. Dropping it (a
/// failed test) stops the runtime, so no loop outlives its test for long.
pub struct Server<H> {
    pub addr: SocketAddr,
    pub control: Control,
    done: Option<mpsc::Receiver<iomux::Result<Finished<H>>>>,
}

/// Starts `threads` loops with `config` on an ephemeral port and returns
/// once every loop is ready (the `on_ready` callback ran).
pub fn serve<H, F>(config: Config, threads: usize, make: F) -> Server<H>
where
    H: Handler + Send + 'static,
    F: Fn(usize) -> H + Sync + Send + 'static,
{
    let runtime =
        Runtime::new(config, threads).expect("runtime").bind("127.0.0.1:0".parse().unwrap()).expect("bind 127.0.0.1:0");
    start(runtime, make)
}

/// The same on a listener made elsewhere (`Runtime::listener`).
pub fn serve_listener<H, F>(config: Config, threads: usize, listener: TcpListener, make: F) -> Server<H>
where
    H: Handler + Send + 'static,
    F: Fn(usize) -> H + Sync + Send + 'static,
{
    start(Runtime::new(config, threads).expect("runtime").listener(listener).expect("adopt the listener"), make)
}

/// Runs `runtime` (bound already) on its own thread, returning once
/// every loop is ready.
pub fn start<H, F>(runtime: Runtime, make: F) -> Server<H>
where
    H: Handler + Send + 'static,
    F: Fn(usize) -> H + Sync + Send + 'static,
{
    let control = Control::new();
    // A runtime on a Unix socket has no address: its tests connect by path.
    let addr = runtime.local_addr().unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let (ready_tx, ready_rx) = mpsc::channel();
    let runtime = runtime.controlled_by(control.clone()).on_ready(move || {
        let _ = ready_tx.send(());
    });
    let mut server = Server { addr, control, done: Some(spawn_run(runtime, make)) };
    if ready_rx.recv_timeout(LIMIT).is_err() {
        // Never ready: a set-up step failed (the result says which) or hung.
        match server.done.take().unwrap().recv_timeout(LIMIT) {
            Ok(Err(e)) => panic!("the runtime failed to start: {e}"),
            _ => panic!("the runtime was not ready within {LIMIT:?}"),
        }
    }
    server
}

impl<H> Server<H> {
    /// Stops the runtime gracefully and returns what it left.
    pub fn stop(self) -> Finished<H> {
        self.control.stop();
        self.finish()
    }

    /// Waits for the runtime to end (after a stop).
    pub fn finish(mut self) -> Finished<H> {
        let done = self.done.take().expect("finished once");
        match done.recv_timeout(LIMIT) {
            Ok(result) => result.expect("the runtime ended with an error"),
            Err(_) => panic!("the runtime did not end within {LIMIT:?} of its stop"),
        }
    }
}

impl<H> Drop for Server<H> {
    fn drop(&mut self) {
        self.control.stop();
    }
}

/// Runs a client-only runtime (no listener) until it ends by itself: its
/// handler has no connections, timers or notices left.
pub fn run_client<H, F>(config: Config, make: F) -> Finished<H>
where
    H: Handler + Send + 'static,
    F: Fn(usize) -> H + Sync + Send + 'static,
{
    let control = Control::new();
    let runtime = Runtime::new(config, 1).expect("runtime").controlled_by(control.clone());
    match spawn_run(runtime, make).recv_timeout(LIMIT) {
        Ok(result) => result.expect("the client runtime ended with an error"),
        Err(_) => {
            control.stop();
            panic!("the client runtime did not end by itself within {LIMIT:?}");
        }
    }
}

/// Runs `runtime` on a thread of its own; its result comes on the channel.
fn spawn_run<H, F>(runtime: Runtime, make: F) -> mpsc::Receiver<iomux::Result<Finished<H>>>
where
    H: Handler + Send + 'static,
    F: Fn(usize) -> H + Sync + Send + 'static,
{
    let (done_tx, done_rx) = mpsc::channel();
    thread::Builder::new()
        .name("runtime-under-test".into())
        .spawn(move || {
            let _ = done_tx.send(runtime.run(make));
        })
        .expect("spawn the runtime's thread");
    done_rx
}

/// A client connection with timeouts on both directions and no Nagle.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, LIMIT).expect("connect to the server");
    set_timeouts(&s);
    s
}

pub fn set_timeouts(s: &TcpStream) {
    s.set_read_timeout(Some(LIMIT)).expect("read timeout");
    s.set_write_timeout(Some(LIMIT)).expect("write timeout");
    s.set_nodelay(true).expect("nodelay");
}

/// A listener for outbound connections of a runtime, accepting with a
/// time limit (polled, as std's accept has none).
pub fn accept_within(listener: &TcpListener) -> TcpStream {
    listener.set_nonblocking(true).expect("nonblocking listener");
    let deadline = Instant::now() + LIMIT;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).expect("blocking stream");
                set_timeouts(&s);
                return s;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("no connection accepted within {LIMIT:?}: {e}"),
        }
    }
}

/// An address where nothing listens: a port just bound and released.
pub fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("local addr")
}

/// How a read to the end ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Eof,
    /// An error other than a timeout (ECONNRESET after a reset).
    Error(ErrorKind),
}

/// Reads until EOF or an error; a timeout fails the test.
pub fn read_to_end(s: &mut impl Read) -> (Vec<u8>, End) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (got, End::Eof),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => panic!("read timed out after {} bytes", got.len()),
            Err(e) => return (got, End::Error(e.kind())),
        }
    }
}

/// Reads exactly `n` bytes; EOF, an error or a timeout first fails.
pub fn read_exact(s: &mut impl Read, n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    if let Err(e) = s.read_exact(&mut got) {
        panic!("reading {n} bytes: {e}");
    }
    got
}

pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Makes closing `s` send RST instead of FIN (SO_LINGER with a zero time).
pub fn reset_on_close(s: &TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the descriptor is open for the call (borrowed from `s`), and
    // the option value points at a live `linger` whose size is passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt(SO_LINGER): {}", io::Error::last_os_error());
}

/// Closes `s` with a reset.
pub fn reset(s: TcpStream) {
    reset_on_close(&s);
    drop(s);
}

/// `len` bytes of a pattern that never repeats at a short period, from
/// stream offset `start`: a lost, doubled or moved chunk shows.
pub fn pattern(start: usize, len: usize) -> Vec<u8> {
    (start..start + len).map(|i| (i % 251) as u8 ^ (i >> 13) as u8).collect()
}

/// Asserts two byte strings are equal, naming the first difference
/// instead of printing megabytes.
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    panic!("{what}: got {} bytes, want {}; first difference at offset {first}", got.len(), want.len());
}

/// Waits until `cond` holds, polling; fails the test past [`LIMIT`].
#[track_caller]
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out ({LIMIT:?}) waiting until {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until the counter reaches `n`; fails the test past [`LIMIT`],
/// naming the count reached.
#[track_caller]
pub fn wait_count(what: &str, counter: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + LIMIT;
    while counter.load(Ordering::SeqCst) < n {
        let now = counter.load(Ordering::SeqCst);
        assert!(Instant::now() < deadline, "timed out ({LIMIT:?}) waiting for {n} {what}: {now} so far");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Sends `data` from a thread of its own in `chunk`-sized writes, then
/// shuts the write side down if asked; returns the first write error.
pub fn send_in_background<S: Stream>(
    s: &S,
    data: Vec<u8>,
    chunk: usize,
    shutdown: bool,
) -> thread::JoinHandle<Option<ErrorKind>> {
    let mut w = s.another().expect("clone the stream");
    thread::spawn(move || {
        for part in data.chunks(chunk.max(1)) {
            if let Err(e) = w.write_all(part) {
                return Some(e.kind());
            }
        }
        if shutdown {
            if let Err(e) = w.shutdown_write() {
                return Some(e.kind());
            }
        }
        None
    })
}

/// A client's stream, TCP or Unix, for the helpers that take either.
pub trait Stream: Read + Write + Send + Sized + 'static {
    /// A second handle on the same connection (for a writer thread).
    fn another(&self) -> io::Result<Self>;
    /// Shuts the write side down (FIN, or a Unix socket's end of input).
    fn shutdown_write(&self) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn another(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

impl Stream for std::os::unix::net::UnixStream {
    fn another(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

/// Echoes everything; records each connection's close reason.
pub struct Echo {
    pub closes: std::sync::Arc<std::sync::Mutex<Vec<Reason>>>,
}

impl Handler for Echo {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let _ = io.write(conn, data);
        data.len()
    }

    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.closes.lock().unwrap().push(reason.into());
    }
}
