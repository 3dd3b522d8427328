//! Programs of two connections, asserted on every backend: each direction
//! half-closes on its own (`on_read_closed`, `Io::shutdown_write`), reading
//! one connection is tied to the output of another (`Io::notify_below`),
//! input comes in slices of at most `read_buffer` new bytes, a reset close
//! (`Io::abort`), outbound connects that fail or time out (always through
//! `on_close`), and Unix stream sockets, both ways, behind the same
//! `Handler`. A relay (the core of a TCP proxy) runs through all of it.

#[path = "../examples/proxy.rs"]
mod proxy;
#[macro_use]
mod runtime_support;

use iomux::runtime::{CloseReason, Config, ConnId, Finished, Handler, Io, Runtime};
use iomux::Backend;
use proxy::{Proxy, Upstream, HIGH};
use runtime_support::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

on_every_backend! {
    reads_to_the_end_then_answers,
    shutdown_write_keeps_reading,
    abort_resets_the_peer,
    input_comes_in_bounded_slices,
    a_declined_slice_grows_until_the_request_is_whole,
    drained_notice_at_a_low_water_mark,
    relay_returns_the_whole_reply_after_a_half_close,
    relay_bounds_what_it_queues,
    relay_closes_its_client_when_the_upstream_refuses,
    unix_echo_with_a_half_close,
    relay_to_a_unix_upstream,
    connect_failures_come_to_on_close,
    a_reset_ends_a_half_closed_connection_at_once,
    a_reconnect_from_on_close_waits_for_the_next_turn,
    the_end_of_input_waits_while_paused_again,
    spliced_relay_returns_the_whole_reply_after_a_half_close,
    spliced_relay_holds_a_slow_reader_back,
    spliced_relay_to_a_unix_upstream,
    spliced_relay_passes_a_reset_on,
    spliced_relay_answers_a_request_after_a_pause,
    a_full_spliced_reader_holds_no_other_connection_back,
    an_urgent_byte_ends_the_splice_and_nothing_is_lost,
    spliced_bytes_wait_behind_queued_output,
}

fn config(backend: Backend) -> iomux::runtime::ConfigBuilder {
    Config::builder().backend(backend)
}

/// Serves on a fresh Unix socket path in a temporary folder of its own
/// (removed with the returned guard).
fn serve_unix<H, F>(config: Config, make: F) -> (Server<H>, TempDir)
where
    H: Handler + Send + 'static,
    F: Fn(usize) -> H + Sync + Send + 'static,
{
    let dir = TempDir::new();
    let runtime = Runtime::new(config, 2).expect("runtime").bind_unix(dir.sock()).expect("bind_unix");
    (start(runtime, make), dir)
}

/// A folder of its own under the system's temporary folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, SeqCst);
        let dir = std::env::temp_dir().join(format!("iomux-relay-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        TempDir(dir)
    }
    fn sock(&self) -> PathBuf {
        self.0.join("s.sock")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unix_client(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).expect("connect to the Unix socket");
    s.set_read_timeout(Some(LIMIT)).expect("read timeout");
    s.set_write_timeout(Some(LIMIT)).expect("write timeout");
    s
}

/// Close reasons, shared with the test thread.
type Closes = Arc<Mutex<Vec<Reason>>>;

// ------------------------------------------------------------ half-close

/// Reads to the client's end of input, counting, then answers the count
/// and shuts its side down (the default would close without answering).
struct CountToEnd(Closes);

impl Handler for CountToEnd {
    type Conn = u64;
    type Message = ();
    fn on_accept(&mut self, _io: &mut Io<u64>, _conn: ConnId) -> u64 {
        0
    }
    fn on_data(&mut self, _io: &mut Io<u64>, _conn: ConnId, n: &mut u64, data: &[u8]) -> usize {
        *n += data.len() as u64;
        data.len()
    }
    fn on_read_closed(&mut self, io: &mut Io<u64>, conn: ConnId, n: &mut u64) {
        assert!(io.write(conn, format!("{n}\n").as_bytes()), "our side is still open");
        io.shutdown_write(conn);
        assert!(!io.write(conn, b"more"), "a write after shutdown_write is refused");
    }
    fn on_close(&mut self, _io: &mut Io<u64>, _conn: ConnId, _n: u64, reason: &CloseReason) {
        self.0.lock().unwrap().push(reason.into());
    }
}

/// A client sends 1 MiB and shuts its write side down: a handler that
/// reads to the end before it answers gets it all, and its answer comes
/// back whole, then EOF; both sides ended in order (PeerClosed).
fn reads_to_the_end_then_answers(backend: Backend) {
    let closes = Closes::default();
    let c2 = closes.clone();
    let server = serve(config(backend).build().unwrap(), 1, move |_| CountToEnd(c2.clone()));
    let mut c = connect(server.addr);
    let writer = send_in_background(&c, pattern(0, 1 << 20), 10_007, true);
    let (got, end) = read_to_end(&mut c);
    assert_eq!(writer.join().unwrap(), None, "{backend}: sending");
    assert_eq!((String::from_utf8_lossy(&got).as_ref(), end), ("1048576\n", End::Eof), "{backend}");
    wait_until("the close", || closes.lock().unwrap().len() == 1);
    assert_eq!(*closes.lock().unwrap(), [Reason::PeerClosed], "{backend}");
}

/// Greets, shuts its write side down at once, and counts what it reads
/// after that.
struct GreetThenListen {
    counted: Arc<AtomicUsize>,
    closes: Closes,
}

impl Handler for GreetThenListen {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        let _ = io.write(conn, b"hello");
        io.shutdown_write(conn);
    }
    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        self.counted.fetch_add(data.len(), SeqCst);
        data.len()
    }
    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.closes.lock().unwrap().push(reason.into());
    }
}

/// After `shutdown_write` the client reads the greeting, then EOF, and
/// may still send: the server reads every byte of it until the client's
/// own end of input, and then the connection closes in order.
fn shutdown_write_keeps_reading(backend: Backend) {
    const SENT: usize = 256 << 10;
    let (counted, closes) = (Arc::new(AtomicUsize::new(0)), Closes::default());
    let (c2, cl2) = (counted.clone(), closes.clone());
    let server = serve(config(backend).build().unwrap(), 1, move |_| GreetThenListen {
        counted: c2.clone(),
        closes: cl2.clone(),
    });
    let mut c = connect(server.addr);
    let (got, end) = read_to_end(&mut c);
    assert_eq!((got.as_slice(), end), (&b"hello"[..], End::Eof), "{backend}: the greeting, then our EOF");
    c.write_all(&pattern(0, SENT)).unwrap();
    wait_count("bytes read after our FIN", &counted, SENT);
    assert!(closes.lock().unwrap().is_empty(), "{backend}: closed before the client's end of input");
    c.shutdown(std::net::Shutdown::Write).unwrap();
    wait_until("the close", || closes.lock().unwrap().len() == 1);
    assert_eq!(*closes.lock().unwrap(), [Reason::PeerClosed], "{backend}");
    assert_eq!(counted.load(SeqCst), SENT, "{backend}");
}

// ---------------------------------------------------------------- abort

/// Queues 8 MiB on each connection, then resets it.
struct FloodThenAbort(Closes);

impl Handler for FloodThenAbort {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let _ = io.write(conn, &vec![7u8; 8 << 20]);
        io.abort(conn);
        assert!(!io.write(conn, b"late"), "a write after abort is refused");
        data.len()
    }
    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.0.lock().unwrap().push(reason.into());
    }
}

/// `abort` drops the queued output and resets the peer: the client's
/// read fails with ECONNRESET before 8 MiB arrive; the reason is Aborted.
fn abort_resets_the_peer(backend: Backend) {
    let closes = Closes::default();
    let c2 = closes.clone();
    let server = serve(config(backend).build().unwrap(), 1, move |_| FloodThenAbort(c2.clone()));
    let mut c = connect(server.addr);
    c.write_all(b"go").unwrap();
    wait_until("the close", || closes.lock().unwrap().len() == 1);
    thread::sleep(Duration::from_millis(20)); // the RST on its way
    let (got, end) = read_to_end(&mut c);
    assert_eq!(end, End::Error(ErrorKind::ConnectionReset), "{backend}: after {} bytes", got.len());
    assert!(got.len() < 8 << 20, "{backend}: the whole output arrived");
    assert_eq!(*closes.lock().unwrap(), [Reason::Aborted], "{backend}");
    let finished = server.stop();
    assert_eq!(finished.stats.closed_abnormally, 1, "{backend}");
}

// ------------------------------------------------------- input in slices

/// Pauses reading for its first 200 ms, so input piles up (in the
/// kernel, or on io_uring in the loop), then records every slice.
struct Slices {
    slices: Arc<Mutex<Vec<usize>>>,
    total: Arc<AtomicUsize>,
}

impl Handler for Slices {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        io.pause_reading(conn);
        assert!(io.set_deadline(conn, io.now() + Duration::from_millis(200)));
    }
    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        self.slices.lock().unwrap().push(data.len());
        self.total.fetch_add(data.len(), SeqCst);
        data.len()
    }
    fn on_deadline(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
        io.resume_reading(conn);
    }
}

/// No on_data call gets more than `read_buffer` (16 KiB here) bytes,
/// whatever piled up while reading was paused, on every backend.
fn input_comes_in_bounded_slices(backend: Backend) {
    const READ: usize = 16 << 10;
    const SENT: usize = 1 << 20;
    let (slices, total) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicUsize::new(0)));
    let (s2, t2) = (slices.clone(), total.clone());
    let config = config(backend).read_buffer(READ).build().unwrap();
    let server = serve(config, 1, move |_| Slices { slices: s2.clone(), total: t2.clone() });
    let c = connect(server.addr);
    let writer = send_in_background(&c, pattern(0, SENT), 256 << 10, false);
    wait_count("bytes delivered", &total, SENT);
    assert_eq!(writer.join().unwrap(), None, "{backend}");
    let slices = slices.lock().unwrap();
    let largest = slices.iter().copied().max().unwrap_or(0);
    assert!(largest <= READ, "{backend}: a slice of {largest} bytes (read_buffer {READ})");
    assert!(slices.len() >= SENT / READ, "{backend}: {} slices", slices.len());
}

/// Consumes nothing until it holds a whole 100,000-byte request, then
/// answers "ok".
struct WholeRequest {
    offered: Arc<Mutex<Vec<usize>>>,
}

const REQUEST: usize = 100_000;

impl Handler for WholeRequest {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        self.offered.lock().unwrap().push(data.len());
        if data.len() < REQUEST {
            return 0;
        }
        let _ = io.write(conn, b"ok");
        REQUEST
    }
}

/// A handler that consumes nothing of a 4 KiB slice is offered it again
/// with up to 4 KiB more, so a request larger than `read_buffer` reaches
/// it whole, on every backend.
fn a_declined_slice_grows_until_the_request_is_whole(backend: Backend) {
    let offered = Arc::new(Mutex::new(Vec::new()));
    let o2 = offered.clone();
    let config = config(backend).read_buffer(4096).build().unwrap();
    let server = serve(config, 1, move |_| WholeRequest { offered: o2.clone() });
    let mut c = connect(server.addr);
    c.write_all(&pattern(0, REQUEST)).unwrap();
    assert_eq!(read_exact(&mut c, 2), b"ok", "{backend}");
    let offered = offered.lock().unwrap();
    assert_eq!(offered.iter().filter(|&&n| n >= REQUEST).count(), 1, "{backend}: {offered:?}");
    let grew = offered.windows(2).all(|w| w[1] > w[0]);
    assert!(grew, "{backend}: each offer is larger than the one declined: {offered:?}");
}

// --------------------------------------------------------- low water

/// Queues 16 MiB (more than the two socket buffers hold) and asks to
/// hear when at most 15 MiB are left: a mark the output passes while most
/// of it is still queued, whatever one send takes.
struct LowWater {
    at_notice: Arc<Mutex<Vec<usize>>>,
}

const QUEUED: usize = 16 << 20;
const LOW: usize = 15 << 20;

impl Handler for LowWater {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        let _ = io.write(conn, &pattern(0, QUEUED));
        assert!(io.is_full(conn), "16 MiB queued is over the 4 MiB bound");
        io.notify_below(conn, LOW);
    }
    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }
    fn on_drained(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
        self.at_notice.lock().unwrap().push(io.buffered(conn));
    }
}

/// A reader takes 2 MiB, then stops until the notice has come, then takes
/// the rest: on_drained comes once, with at most the low-water mark left
/// queued and most of it still there (the socket buffers hold a few MiB
/// at most: at the mark, not at empty).
fn drained_notice_at_a_low_water_mark(backend: Backend) {
    let at_notice = Arc::new(Mutex::new(Vec::new()));
    let a2 = at_notice.clone();
    let server = serve(config(backend).build().unwrap(), 1, move |_| LowWater { at_notice: a2.clone() });
    let mut c = connect(server.addr);
    let mut got = read_exact(&mut c, 2 << 20);
    wait_until("the notice", || !at_notice.lock().unwrap().is_empty());
    got.extend(read_exact(&mut c, QUEUED - got.len()));
    assert_bytes(&got, &pattern(0, QUEUED), "the output");
    let at_notice = at_notice.lock().unwrap().clone();
    assert_eq!(at_notice.len(), 1, "{backend}: one notice per call: {at_notice:?}");
    let left = at_notice[0];
    assert!((1 << 20..=LOW).contains(&left), "{backend}: {left} bytes queued at the notice (mark {LOW})");
}

// --------------------------------------------------------------- relay

/// The proxy example (examples/proxy.rs) on one loop, its upstream
/// connects limited to 2 s.
fn relay(backend: Backend, upstream: Upstream, read: usize) -> Server<Proxy> {
    let config = config(backend).read_buffer(read).connect_timeout(Some(Duration::from_secs(2))).build().unwrap();
    serve(config, 1, move |_| Proxy::new(upstream.clone()))
}

/// The relay splicing each direction from its first slice of `at` bytes.
fn spliced_relay(backend: Backend, upstream: Upstream, at: usize) -> Server<Proxy> {
    let config = config(backend).read_buffer(16 << 10).connect_timeout(Some(Duration::from_secs(2))).build().unwrap();
    serve(config, 1, move |_| Proxy { splice_at: Some(at), ..Proxy::new(upstream.clone()) })
}

/// Every close the relay's loops saw, as `CloseReason`'s words.
fn relay_closes(finished: &Finished<Proxy>) -> Vec<String> {
    finished.handlers.iter().flat_map(|h| h.closes.iter().cloned()).collect()
}

const BOTH_IN_ORDER: [&str; 2] = ["closed by both sides in order", "closed by both sides in order"];

/// An upstream that reads its client to the end, then answers `reply`
/// pattern bytes and closes; returns what it read.
fn answer_at_end<S: Stream>(mut s: S, reply: usize) -> Vec<u8> {
    let (got, end) = read_to_end(&mut s);
    assert_eq!(end, End::Eof, "the upstream's read");
    s.write_all(&pattern(7, reply)).expect("the upstream's reply");
    got
}

/// The proxy case of `nc -N`: the client sends 1 MiB and shuts its write
/// side down; the upstream reads to the end, answers 1 MiB and closes;
/// the client gets the whole reply, then EOF; both relayed connections
/// end in order.
fn relay_returns_the_whole_reply_after_a_half_close(backend: Backend) {
    const SENT: usize = 1 << 20;
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || answer_at_end(accept_within(&upstream), SENT));
    let server = relay(backend, Upstream::Tcp(target), 64 << 10);
    let mut c = connect(server.addr);
    let writer = send_in_background(&c, pattern(0, SENT), 10_007, true);
    let (got, end) = read_to_end(&mut c);
    assert_eq!(writer.join().unwrap(), None, "{backend}: sending");
    assert_eq!(end, End::Eof, "{backend}");
    assert_bytes(&got, &pattern(7, SENT), "the reply through the relay");
    assert_bytes(&up.join().unwrap(), &pattern(0, SENT), "what the upstream got");
    // Both closed in the turn that sent the client its EOF, before the stop.
    assert_eq!(relay_closes(&server.stop()), BOTH_IN_ORDER, "{backend}");
}

/// An echo upstream and a client that sends 8 MiB while reading slowly:
/// every byte comes back in order, and no connection's output passed the
/// relay's mark by more than one slice of input (`read_buffer`).
fn relay_bounds_what_it_queues(backend: Backend) {
    const READ: usize = 16 << 10;
    let finished = echo_to_a_slow_reader(backend, 0, |target| relay(backend, Upstream::Tcp(target), READ));
    let peak = finished.stats.peak_output as usize;
    assert!(peak <= HIGH + READ, "{backend}: {peak} bytes queued at the peak (mark {HIGH} + slice {READ})");
}

/// 8 MiB from `seed` on through the relay `start` makes in front of an
/// echo upstream, read back slowly: asserts every byte came back in order
/// and both sides ended in order; returns the relay's figures.
fn echo_to_a_slow_reader(
    backend: Backend,
    seed: usize,
    start: impl FnOnce(SocketAddr) -> Server<Proxy>,
) -> Finished<Proxy> {
    const SENT: usize = 8 << 20;
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || {
        let mut s = accept_within(&upstream);
        let mut w = s.try_clone().unwrap();
        std::io::copy(&mut s, &mut w).expect("the upstream's echo");
    });
    let server = start(target);
    let mut c = connect(server.addr);
    let writer = send_in_background(&c, pattern(seed, SENT), 64 << 10, true);
    let mut got = Vec::with_capacity(SENT);
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let n = c.read(&mut buf).unwrap_or_else(|e| panic!("{backend}: read the echo: {e}"));
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(writer.join().unwrap(), None, "{backend}");
    up.join().unwrap();
    assert_bytes(&got, &pattern(seed, SENT), "the echo through the relay");
    let finished = server.stop();
    assert_eq!(relay_closes(&finished), BOTH_IN_ORDER, "{backend}");
    finished
}

/// An upstream where nothing listens: the relay's client is closed at
/// once (EOF), and the upstream's close says why.
fn relay_closes_its_client_when_the_upstream_refuses(backend: Backend) {
    let server = relay(backend, Upstream::Tcp(closed_port()), 64 << 10);
    let mut c = connect(server.addr);
    let started = std::time::Instant::now();
    let (got, end) = read_to_end(&mut c);
    assert_eq!((got.len(), end), (0, End::Eof), "{backend}");
    assert!(started.elapsed() < Duration::from_millis(500), "{backend}: {:?}", started.elapsed());
    drop(c);
    let closes = relay_closes(&server.stop());
    assert_eq!(closes.len(), 2, "{backend}: {closes:?}");
    let refused = format!("{backend}: connect on fd");
    assert!(closes[0].starts_with(&refused) && closes[0].contains("(os error 111)"), "{backend}: {closes:?}");
}

// ---------------------------------------------------------- unix sockets

/// Over a Unix socket (two loops sharing the listener), 1 MiB sent and
/// the write side shut down: the echo comes back whole, then EOF, and
/// the close is PeerClosed, as over TCP.
fn unix_echo_with_a_half_close(backend: Backend) {
    const SENT: usize = 1 << 20;
    let closes = Closes::default();
    let c2 = closes.clone();
    // Zero-copy sends on: a Unix socket has none, and must not ask for one.
    let config = config(backend).uring_send_zc_min(16 << 10).build().unwrap();
    let (server, dir) = serve_unix(config, move |_| Echo { closes: c2.clone() });
    for round in 0..2 {
        let mut c = unix_client(&dir.sock());
        let writer = send_in_background(&c, pattern(round, SENT), 10_007, true);
        let (got, end) = read_to_end(&mut c);
        assert_eq!((writer.join().unwrap(), end), (None, End::Eof), "{backend}");
        assert_bytes(&got, &pattern(round, SENT), "the echo over a Unix socket");
    }
    wait_until("the closes", || closes.lock().unwrap().len() == 2);
    assert_eq!(*closes.lock().unwrap(), [Reason::PeerClosed, Reason::PeerClosed], "{backend}");
    let finished = server.stop();
    assert_eq!(finished.stats.accepted, 2, "{backend}");
}

/// The relay to a Unix socket upstream (`connect_unix`): the half-close
/// case again, over TCP in front and a Unix socket behind.
fn relay_to_a_unix_upstream(backend: Backend) {
    const SENT: usize = 512 << 10;
    let dir = TempDir::new();
    let listener = UnixListener::bind(dir.sock()).expect("the upstream's socket");
    let up = thread::spawn(move || {
        let (s, _) = listener.accept().expect("the relay's connection");
        s.set_read_timeout(Some(LIMIT)).unwrap();
        answer_at_end(s, SENT)
    });
    let server = relay(backend, Upstream::Unix(dir.sock()), 64 << 10);
    let mut c = connect(server.addr);
    let writer = send_in_background(&c, pattern(0, SENT), 10_007, true);
    let (got, end) = read_to_end(&mut c);
    assert_eq!((writer.join().unwrap(), end), (None, End::Eof), "{backend}");
    assert_bytes(&got, &pattern(7, SENT), "the reply from the Unix upstream");
    assert_bytes(&up.join().unwrap(), &pattern(0, SENT), "what the Unix upstream got");
    assert_eq!(relay_closes(&server.stop()), BOTH_IN_ORDER, "{backend}");
}

// ------------------------------------------------------- failed connects

/// Opens its connections at the start; records each close.
struct Connects {
    unix: Vec<PathBuf>,
    tcp: Vec<SocketAddr>,
    closes: Vec<(usize, Reason)>,
    connected: usize,
}

impl Handler for Connects {
    /// The connection's number, in the order opened.
    type Conn = usize;
    type Message = ();
    fn on_start(&mut self, io: &mut Io<usize>) {
        let mut n = 0;
        for path in &self.unix {
            io.connect_unix(path, n);
            n += 1;
        }
        for &addr in &self.tcp {
            io.connect(addr, None, n);
            n += 1;
        }
    }
    fn on_accept(&mut self, _io: &mut Io<usize>, _conn: ConnId) -> usize {
        unreachable!("a client accepts nothing")
    }
    fn on_connect(&mut self, _io: &mut Io<usize>, _conn: ConnId, _n: &mut usize) {
        self.connected += 1;
    }
    fn on_data(&mut self, _io: &mut Io<usize>, _conn: ConnId, _n: &mut usize, data: &[u8]) -> usize {
        data.len()
    }
    fn on_close(&mut self, _io: &mut Io<usize>, _conn: ConnId, n: usize, reason: &CloseReason) {
        self.closes.push((n, reason.into()));
    }
}

/// A listener whose accept queue is full, so a further connect's SYN is
/// dropped and the connect hangs (the returned client holds the one
/// place; keep both alive).
fn full_listener() -> (TcpListener, std::net::TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // A backlog of 0 holds one connection not yet accepted.
    rustix::net::listen(&listener, 0).expect("listen again with a backlog of 0");
    let first = connect(listener.local_addr().unwrap());
    (listener, first)
}

/// Every way a connect fails comes to on_close, never as an error from
/// `connect`: a Unix path with nothing there (ENOENT, at once), a path
/// too long for a socket address (at once), and a TCP connect that hangs
/// past `connect_timeout` (ConnectTimeout). The client runtime then ends
/// by itself, having connected nothing.
fn connect_failures_come_to_on_close(backend: Backend) {
    let (full, _held) = full_listener();
    let target = full.local_addr().unwrap();
    let missing = std::env::temp_dir().join("iomux-relay-no-such-dir/s.sock");
    let too_long = PathBuf::from(format!("/tmp/{}", "x".repeat(200)));
    let config = config(backend).connect_timeout(Some(Duration::from_millis(300))).build().unwrap();
    let started = std::time::Instant::now();
    let finished = run_client(config, move |_| Connects {
        unix: vec![missing.clone(), too_long.clone()],
        tcp: vec![target],
        closes: Vec::new(),
        connected: 0,
    });
    let h = &finished.handlers[0];
    let mut closes = h.closes.clone();
    closes.sort();
    assert_eq!(
        closes,
        [
            (0, Reason::ConnectFailed(Some(libc::ENOENT))),
            (1, Reason::ConnectFailed(Some(libc::ENAMETOOLONG))),
            (2, Reason::ConnectTimeout)
        ],
        "{backend}"
    );
    assert_eq!(h.connected, 0, "{backend}");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "{backend}: {took:?}");
    drop(full);
}

// ------------------------------------------------ resets, reconnects, pauses

/// Echoes, and at the client's end of input keeps its own side open
/// (a relay waiting for its upstream).
struct EchoThenWait(Closes);

impl Handler for EchoThenWait {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let _ = io.write(conn, data);
        data.len()
    }
    fn on_read_closed(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut ()) {}
    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.0.lock().unwrap().push(reason.into());
    }
}

/// A half-closed connection the server neither reads nor writes, whose
/// client then resets it: it closes (Reset) within a second, without the
/// loop spinning on the hang-up. select is the exception: it cannot watch
/// for an error on a connection it neither reads nor writes, so there the
/// reset is found by the next write (or an idle timeout).
fn a_reset_ends_a_half_closed_connection_at_once(backend: Backend) {
    let closes = Closes::default();
    let c2 = closes.clone();
    let server = serve(config(backend).build().unwrap(), 1, move |_| EchoThenWait(c2.clone()));
    let mut c = connect(server.addr);
    c.write_all(b"ping").unwrap();
    assert_eq!(read_exact(&mut c, 4), b"ping", "{backend}");
    c.shutdown(std::net::Shutdown::Write).unwrap();
    thread::sleep(Duration::from_millis(50)); // the server has the EOF
    reset(c);
    let started = std::time::Instant::now();
    while closes.lock().unwrap().is_empty() && started.elapsed() < Duration::from_secs(1) {
        thread::sleep(Duration::from_millis(5));
    }
    let finished = server.stop();
    if backend == Backend::Select {
        assert_eq!(*closes.lock().unwrap(), [Reason::Shutdown], "{backend}: closed by the stop");
        return;
    }
    assert_eq!(*closes.lock().unwrap(), [Reason::Reset], "{backend}");
    let turns = finished.stats.turns;
    assert!(turns < 1000, "{backend}: {turns} turns: the loop spun on the hang-up");
}

/// Connects to a Unix path with nothing there, and again from every
/// close, 200 times.
struct Redial {
    path: PathBuf,
    left: usize,
    closes: usize,
}

impl Handler for Redial {
    type Conn = ();
    type Message = ();
    fn on_start(&mut self, io: &mut Io<()>) {
        io.connect_unix(&self.path, ());
    }
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }
    fn on_close(&mut self, io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        assert!(matches!(reason, CloseReason::ConnectFailed(_)), "{reason}");
        self.closes += 1;
        if self.left > 0 {
            self.left -= 1;
            io.connect_unix(&self.path, ());
        }
    }
}

/// A connect that fails at once closes on the next turn, so a handler
/// that connects again from on_close makes one attempt a turn, and the
/// client still ends by itself.
fn a_reconnect_from_on_close_waits_for_the_next_turn(backend: Backend) {
    let path = std::env::temp_dir().join("iomux-relay-nothing-here/s.sock");
    let finished =
        run_client(config(backend).build().unwrap(), move |_| Redial { path: path.clone(), left: 200, closes: 0 });
    assert_eq!(finished.handlers[0].closes, 201, "{backend}");
    let turns = finished.stats.turns;
    assert!(turns > 200, "{backend}: {turns} turns for 201 failed connects: several in one turn");
}

/// Pauses after every delivery; a timer resumes and pauses again in one
/// go three times, then resumes for good. Records whether it was paused
/// each time the end of input came.
struct PausedEof {
    paused: bool,
    timers: u32,
    told: Arc<Mutex<Vec<bool>>>,
}

impl Handler for PausedEof {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {
        // Data and FIN are both in before the first read.
        thread::sleep(Duration::from_millis(50));
    }
    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        io.pause_reading(conn);
        if !std::mem::replace(&mut self.paused, true) && self.timers == 0 {
            // From now: the loop's clock was read before on_accept's sleep.
            let _ = io.set_timer(std::time::Instant::now() + Duration::from_millis(5), conn.as_u64());
        }
        data.len()
    }
    fn on_timer(&mut self, io: &mut Io<()>, _timer: iomux::runtime::TimerId, token: u64) {
        let conn = ConnId::from_u64(token);
        self.timers += 1;
        io.resume_reading(conn);
        if self.timers <= 3 {
            io.pause_reading(conn); // resumed and paused again in one callback
        } else {
            self.paused = false;
        }
        if self.timers < 4 {
            let _ = io.set_timer(std::time::Instant::now() + Duration::from_millis(5), token);
        }
    }
    fn on_read_closed(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
        self.told.lock().unwrap().push(self.paused);
        io.shutdown_write(conn);
    }
}

/// The end of input is told only while reading: not when a callback
/// resumed and paused again, on any backend.
fn the_end_of_input_waits_while_paused_again(backend: Backend) {
    let told = Arc::new(Mutex::new(Vec::new()));
    let t2 = told.clone();
    let server =
        serve(config(backend).build().unwrap(), 1, move |_| PausedEof { paused: false, timers: 0, told: t2.clone() });
    let mut c = connect(server.addr);
    c.write_all(b"request").unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let (got, end) = read_to_end(&mut c);
    assert_eq!((got.len(), end), (0, End::Eof), "{backend}");
    server.stop();
    assert_eq!(*told.lock().unwrap(), [false], "{backend}: told once, not while paused");
}

// ---------------------------------------------------------------- splice

/// The half-close case with both directions spliced from their first
/// byte: the client's 8 MiB reach the upstream and the upstream's 8 MiB
/// reply the client, whole and in order, each end passed on after the
/// bytes before it; and most of it went by splice, not through on_data.
/// (On io_uring a multishot receive holds up to its ring, 1 MiB, before
/// its cancel lands: that much goes through on_data first.)
fn spliced_relay_returns_the_whole_reply_after_a_half_close(backend: Backend) {
    const SENT: usize = 8 << 20;
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || answer_at_end(accept_within(&upstream), SENT));
    let server = spliced_relay(backend, Upstream::Tcp(target), 1);
    let mut c = connect(server.addr);
    let writer = send_in_background(&c, pattern(0, SENT), 10_007, true);
    let (got, end) = read_to_end(&mut c);
    assert_eq!((writer.join().unwrap(), end), (None, End::Eof), "{backend}");
    assert_bytes(&got, &pattern(7, SENT), "the reply through the spliced relay");
    assert_bytes(&up.join().unwrap(), &pattern(0, SENT), "what the upstream got");
    let finished = server.stop();
    assert_eq!(relay_closes(&finished), BOTH_IN_ORDER, "{backend}");
    let spliced = finished.stats.spliced as usize;
    assert!(spliced >= SENT, "{backend}: only {spliced} of {} bytes spliced", 2 * SENT);
    assert!(spliced <= 2 * SENT, "{backend}: {spliced} bytes spliced, more than relayed");
}

/// An echo upstream and a client that sends 8 MiB while reading slowly,
/// both directions spliced: every byte comes back in order, and the
/// relay's queued output stays within its mark (a pipe is at most 64 KiB,
/// and a full one stops reading its source).
fn spliced_relay_holds_a_slow_reader_back(backend: Backend) {
    let finished = echo_to_a_slow_reader(backend, 3, |target| spliced_relay(backend, Upstream::Tcp(target), 1));
    let (peak, spliced) = (finished.stats.peak_output as usize, finished.stats.spliced as usize);
    assert!(peak <= HIGH + (16 << 10), "{backend}: {peak} bytes queued at the peak");
    assert!(spliced >= 8 << 20, "{backend}: only {spliced} of {} bytes spliced", 16 << 20);
}

/// Splicing into and out of a Unix socket upstream: the half-close case.
fn spliced_relay_to_a_unix_upstream(backend: Backend) {
    const SENT: usize = 8 << 20;
    let dir = TempDir::new();
    let listener = UnixListener::bind(dir.sock()).expect("the upstream's socket");
    let up = thread::spawn(move || {
        let (s, _) = listener.accept().expect("the relay's connection");
        answer_at_end(s, SENT)
    });
    let server = spliced_relay(backend, Upstream::Unix(dir.sock()), 1);
    let mut c = connect(server.addr);
    let writer = send_in_background(&c, pattern(1, SENT), 4_099, true);
    let (got, end) = read_to_end(&mut c);
    assert_eq!((writer.join().unwrap(), end), (None, End::Eof), "{backend}");
    assert_bytes(&got, &pattern(7, SENT), "the reply from the Unix upstream");
    assert_bytes(&up.join().unwrap(), &pattern(1, SENT), "what the Unix upstream got");
    let finished = server.stop();
    assert_eq!(relay_closes(&finished), BOTH_IN_ORDER, "{backend}");
    assert!(finished.stats.spliced as usize >= SENT, "{backend}: {} bytes spliced", finished.stats.spliced);
}

/// An upstream that resets while the client's bytes are spliced to it:
/// the relay passes the reset on to the client at once (its reads end,
/// never time out), and its closes say so.
fn spliced_relay_passes_a_reset_on(backend: Backend) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || {
        let mut s = accept_within(&upstream);
        let mut buf = vec![0u8; 256 << 10];
        s.read_exact(&mut buf).expect("the upstream's read");
        reset(s); // SO_LINGER 0 (and bytes unread): a reset
    });
    let server = spliced_relay(backend, Upstream::Tcp(target), 1);
    let mut c = connect(server.addr);
    let writer = send_in_background(&c, pattern(2, 64 << 20), 64 << 10, false);
    up.join().unwrap();
    let started = std::time::Instant::now();
    // The reset reaches whichever of the client's reader and writer asks
    // first; the other then sees the end: Eof here, or the write's error.
    let (got, end) = read_to_end(&mut c); // a timeout fails the test
    assert!(got.is_empty() && matches!(end, End::Eof | End::Error(ErrorKind::ConnectionReset)), "{backend}: {end:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "{backend}: closed after {:?}", started.elapsed());
    drop(c);
    let _ = writer.join();
    let closes = relay_closes(&server.stop());
    assert_eq!(closes, ["reset by the peer", "reset by the handler"], "{backend}");
}

/// An echo upstream that echoes until its end of input.
fn echo_upstream() -> (SocketAddr, thread::JoinHandle<()>) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || {
        let mut s = accept_within(&upstream);
        let mut w = s.try_clone().unwrap();
        let _ = std::io::copy(&mut s, &mut w);
    });
    (target, up)
}

/// A client that sends one byte (the relay splices from then on), waits,
/// sends 10,000 more and waits for all 10,001 back without closing: a
/// splice that blocked on the quiet socket would hold the loop, and the
/// echo, until the client left.
fn spliced_relay_answers_a_request_after_a_pause(backend: Backend) {
    let (target, up) = echo_upstream();
    let server = spliced_relay(backend, Upstream::Tcp(target), 1);
    let mut c = connect(server.addr);
    c.write_all(b"x").unwrap();
    thread::sleep(Duration::from_millis(100));
    c.write_all(&pattern(0, 10_000)).unwrap();
    let got = read_exact(&mut c, 10_001); // a timeout fails the test
    assert_bytes(&got, &[&b"x"[..], &pattern(0, 10_000)].concat(), "the echo");
    drop(c);
    up.join().unwrap();
    server.stop();
}

/// Two relayed clients on one loop: A's upstream sends 8 MiB that A does
/// not read, so the pipe into A and A's socket fill; B's 1 KB still comes
/// back at once (a splice into A's full socket must not block the loop).
fn a_full_spliced_reader_holds_no_other_connection_back(backend: Backend) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || {
        let mut a = accept_within(&upstream);
        let b = accept_within(&upstream);
        let flood = thread::spawn(move || {
            let _ = a.write_all(&pattern(0, 8 << 20));
            let _ = a.shutdown(Shutdown::Write);
            let _ = read_to_end(&mut a);
        });
        let (mut r, mut w) = (b.try_clone().unwrap(), b);
        let _ = std::io::copy(&mut r, &mut w);
        flood.join().unwrap();
    });
    let server = spliced_relay(backend, Upstream::Tcp(target), 1);
    let mut a = connect(server.addr);
    a.write_all(b"a").unwrap(); // A's upstream is accepted first
    thread::sleep(Duration::from_millis(100));
    let mut b = connect(server.addr);
    b.write_all(b"b").unwrap();
    assert_eq!(read_exact(&mut b, 1), b"b");
    thread::sleep(Duration::from_millis(200)); // A's download fills what it can
    b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    b.write_all(&[7u8; 1000]).unwrap();
    assert_eq!(read_exact(&mut b, 1000), [7u8; 1000], "{backend}: B's echo behind A's full socket");
    let (got, end) = read_to_end(&mut a);
    assert_eq!(end, End::Eof, "{backend}");
    assert_bytes(&got, &pattern(0, 8 << 20), "A's download");
    drop(b);
    drop(a);
    up.join().unwrap();
    server.stop();
}

/// TCP urgent data in a spliced direction: the kernel's splice stops at the
/// mark (SO_OOBINLINE keeps the byte in the stream), so the relay goes on
/// by recv; the upstream gets every byte, the urgent one in its place.
fn an_urgent_byte_ends_the_splice_and_nothing_is_lost(backend: Backend) {
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || read_to_end(&mut accept_within(&upstream)));
    let server = spliced_relay(backend, Upstream::Tcp(target), 1);
    let mut c = connect(server.addr);
    let (before, after) = (pattern(0, 20_000), pattern(1, 20_000));
    c.write_all(&before).unwrap();
    thread::sleep(Duration::from_millis(100)); // spliced by now
    let urgent = b'!';
    // SAFETY: the descriptor is open (borrowed from `c`) and the buffer is
    // one live byte, its length passed with it.
    let sent = unsafe { libc::send(c.as_raw_fd(), (&urgent as *const u8).cast(), 1, libc::MSG_OOB) };
    assert_eq!(sent, 1, "send(MSG_OOB): {}", std::io::Error::last_os_error());
    c.write_all(&after).unwrap();
    thread::sleep(Duration::from_millis(100));
    c.shutdown(Shutdown::Write).unwrap();
    let (got, end) = up.join().unwrap();
    assert_eq!(end, End::Eof, "{backend}");
    assert_bytes(&got, &[&before[..], &[urgent], &after[..]].concat(), "what the upstream got");
    drop(c);
    server.stop();
}

/// A relay that queues 4 MiB on the upstream (which does not read at
/// first), then the client's first bytes, then splices: the pipe waits
/// behind that output, and the client's 4 MiB all arrive after it.
struct QueueThenSplice(SocketAddr);

impl Handler for QueueThenSplice {
    /// The partner, and whether this side is the upstream.
    type Conn = (ConnId, bool);
    type Message = ();
    fn on_accept(&mut self, io: &mut Io<(ConnId, bool)>, conn: ConnId) -> (ConnId, bool) {
        (io.connect(self.0, None, (conn, true)), false)
    }
    fn on_data(&mut self, io: &mut Io<(ConnId, bool)>, conn: ConnId, side: &mut (ConnId, bool), data: &[u8]) -> usize {
        let (to, upstream) = *side;
        if !upstream && io.spliced(conn) == 0 && io.buffered(to) == 0 {
            let _ = io.write(to, &pattern(9, 4 << 20));
        }
        let _ = io.write(to, data) && io.splice(conn, to);
        data.len()
    }
}

fn spliced_bytes_wait_behind_queued_output(backend: Backend) {
    const QUEUED: usize = 4 << 20;
    // More than an io_uring receive holds before its cancel lands (1 MiB).
    const SENT: usize = 4 << 20;
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = upstream.local_addr().unwrap();
    let up = thread::spawn(move || {
        let mut s = accept_within(&upstream);
        thread::sleep(Duration::from_millis(300));
        read_exact(&mut s, QUEUED + SENT)
    });
    let server = serve(config(backend).read_buffer(16 << 10).build().unwrap(), 1, move |_| QueueThenSplice(target));
    let mut c = connect(server.addr);
    c.write_all(&pattern(0, SENT)).unwrap(); // and waits: no end of input
    let got = up.join().unwrap(); // a timeout fails the test
    assert_bytes(&got, &[&pattern(9, QUEUED)[..], &pattern(0, SENT)].concat(), "what the upstream got");
    drop(c);
    let finished = server.stop();
    assert!(finished.stats.spliced > 0, "{backend}: nothing spliced");
}
