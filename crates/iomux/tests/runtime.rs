//! The runtime's documented semantics, asserted on every backend: partial
//! consumption, the input limit, closing with output pending, lingering
//! close, half-close both ways, resets, timers, per-connection state made
//! and dropped once, a stop that drains output, a failed connect; then a
//! property test that drives random traffic through every backend (the
//! server sometimes taking input a piece per call, pausing its reading and
//! resuming it from a deadline) and checks each against one model.
//!
//! Servers run in-process on a thread of their own; clients are std
//! sockets in the test thread, with timeouts everywhere, so a test fails
//! instead of hanging.
//!
//! An ignored test names a library bug it shows (`--ignored` runs it);
//! it passes once the bug is fixed.

#[macro_use]
mod runtime_support;

use iomux::runtime::{Bytes, CloseReason, Config, ConnId, Finished, Handler, Io, Runtime, Sender, TimerId};
use iomux::Backend;
use proptest::prelude::*;
use runtime_support::*;
use std::collections::{BTreeMap, HashMap};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

on_every_backend! {
    partial_consumption,
    input_limit_is_exclusive,
    input_limit_in_one_burst,
    close_with_pending_output,
    close_gives_up_on_a_peer_that_does_not_read,
    lingering_close,
    write_after_close_is_refused,
    write_after_idle_close_is_refused,
    close_idle_has_its_own_reason,
    a_peer_that_takes_nothing_is_timed_out,
    half_close_inbound,
    half_close_outbound,
    writes_before_connect_go_out_after_it,
    close_while_connecting,
    reset_after_echo,
    reset_with_data_in_flight,
    reset_while_output_pending,
    timers,
    state_made_and_dropped_once,
    stop_drains_pending_output,
    stop_gives_up_at_the_drain_timeout,
    drain_timeout_counts_from_the_stop,
    stop_from_a_handler,
    serves_a_listener_made_elsewhere,
    drained_notice_once_output_is_out,
    max_conns_pauses_accepting,
    stale_ids_reach_nothing,
    connect_refused,
    one_request_per_call,
    output_bound_holds_against_a_pipeline,
    paused_reading_resumes_with_the_input_left,
    paused_reading_holds_a_fast_sender_back,
    stop_closes_idle_connections_at_once,
    addresses_of_a_connection,
    a_handler_that_is_not_send,
    deadlines_fire_move_and_clear,
    writes_in_place_keep_their_order,
    shared_buffers_go_out_gathered_in_order,
    messages_cross_loops_in_order,
    a_pin_made_for_a_lone_loop_ends_with_run,
}

fn config(backend: Backend) -> iomux::runtime::ConfigBuilder {
    Config::builder().backend(backend)
}

/// What every test server shares with its test: counters to wait on.
#[derive(Default)]
struct Probe {
    /// Connection states made (accepted or handed to `connect`).
    created: AtomicUsize,
    /// Connection states dropped.
    dropped: AtomicUsize,
    /// `on_close` calls.
    closed: AtomicUsize,
    accepted: AtomicUsize,
    connected: AtomicUsize,
    /// Large replies queued ('f' and 'r' commands).
    flooded: AtomicUsize,
    /// Bytes handed to `on_data`, all connections together.
    delivered: AtomicUsize,
    /// Commands (and complete `n` headers) received.
    commands: AtomicUsize,
    /// on_drained calls.
    drained: AtomicUsize,
    /// Bytes the `a`/`A` connections took and held back.
    held: AtomicUsize,
}

/// A connection's state in [`Cmd`]: what it does, and a drop counter.
struct Tracked {
    mode: Mode,
    /// The `n` command's tag, once its header came.
    tag: Option<u32>,
    /// The `p` command's pacing (the `n` command's: none).
    pacing: Pacing,
    /// Deliveries so far: every other one echoes through a shared buffer.
    calls: u64,
    /// `a`/`A`: the echo is held until the end of input (or the close).
    at_end: bool,
    /// on_read_closed was called (once at most).
    told: bool,
    held: Vec<u8>,
    probe: Arc<Probe>,
}

/// How a `p` connection takes its input: at most `take` bytes a call (0:
/// all), and reading paused after every `pause_every` bytes (0: never),
/// resumed by a deadline 1 ms later.
#[derive(Clone, Copy, Default)]
struct Pacing {
    take: usize,
    pause_every: u64,
    since_pause: u64,
    paused: bool,
}

impl Tracked {
    fn new(probe: &Arc<Probe>) -> Tracked {
        probe.created.fetch_add(1, SeqCst);
        Tracked {
            mode: Mode::Undecided,
            tag: None,
            pacing: Pacing::default(),
            calls: 0,
            at_end: false,
            told: false,
            held: Vec::new(),
            probe: probe.clone(),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.probe.dropped.fetch_add(1, SeqCst);
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Waiting for the command.
    Undecided,
    Echo,
    /// Echo this many more bytes, then close.
    EchoThenClose(u64),
    /// Keep what arrives (in `Cmd::received`).
    Sink,
    /// `Io::close` was called: nothing more may be delivered.
    Closed,
}

/// The test server: the first byte a client sends picks the behaviour.
/// - `e`: echo everything after it;
/// - `s`: keep everything after it in `received`, answer nothing;
/// - `c`: close at once;
/// - `f`: write `flood` pattern bytes, then keep what arrives;
/// - `r`: write `flood` pattern bytes, then close at once;
/// - `q`: stop the loop (`Io::stop`), then echo;
/// - `d`: write `flood` pattern bytes and ask for on_drained, then echo;
///   `D`: ask for on_drained with nothing queued, then echo;
/// - `z`: write to and close the id of the last closed connection, then
///   echo;
/// - `w`: write, close, write again (which must be refused); `W`: the
///   same without the first write;
/// - `n` + tag (u32 LE) + N (u64 LE): echo the next N bytes, then close
///   (N = u64::MAX: echo all); the close reason is kept under the tag.
///   The 13-byte header is left unconsumed until it is complete.
/// - `p` + tag (u32 LE) + N (u64 LE) + take (u32 LE) + pause_every (u32
///   LE): as `n`, consuming at most `take` bytes a call (0: all), and
///   pausing reading after every `pause_every` bytes (0: never) until a
///   deadline 1 ms later resumes it.
/// - `a`, `A`: as `n` and `p`, but the echo is held back until the
///   client's end of input (then written, and our side shut down after
///   it), or until N bytes came (then written, and the connection closed):
///   a server that reads a request to its end before it answers.
struct Cmd {
    /// The `f`, `r` and `d` reply (made once: a 16 MiB pattern takes a
    /// debug build long enough to skew the loop's clock).
    flood: Arc<Vec<u8>>,
    /// How long the `f` command blocks the loop after its write.
    stall: Duration,
    probe: Arc<Probe>,
    /// Outbound connections each loop opens at its start.
    connect_to: Vec<SocketAddr>,
    closes: Vec<Reason>,
    tagged: BTreeMap<u32, Reason>,
    received: Vec<u8>,
    /// `on_data` calls for a connection already closed (a bug if any).
    late: usize,
    /// What `Io::write` returned for the `w` command.
    write_results: Vec<bool>,
    /// `Io::buffered` at each on_drained.
    drained: Vec<usize>,
    last_closed: Option<ConnId>,
    /// For `z`: what writing to the stale id returned, whether its state is
    /// gone, its buffered bytes, and whether it equals the live id.
    stale: Option<(bool, bool, usize, bool)>,
}

const HEADER: usize = 13;
const PACED_HEADER: usize = HEADER + 8;

impl Cmd {
    fn new(probe: &Arc<Probe>) -> Cmd {
        Cmd {
            flood: Arc::default(),
            stall: Duration::ZERO,
            probe: probe.clone(),
            connect_to: Vec::new(),
            closes: Vec::new(),
            tagged: BTreeMap::new(),
            received: Vec::new(),
            late: 0,
            write_results: Vec::new(),
            drained: Vec::new(),
            last_closed: None,
            stale: None,
        }
    }

    fn flooding(mut self, flood: &Arc<Vec<u8>>) -> Cmd {
        self.flood = flood.clone();
        self
    }

    /// The command at the start of `data`: the mode and the header length,
    /// or None while the header is incomplete.
    fn command(&mut self, io: &mut Io<Tracked>, conn: ConnId, state: &mut Tracked, data: &[u8]) -> Option<usize> {
        let (mode, header) = match data[0] {
            b'n' | b'a' if data.len() < HEADER => return None,
            b'p' | b'A' if data.len() < PACED_HEADER => return None,
            b'n' | b'p' | b'a' | b'A' => {
                state.tag = Some(u32::from_le_bytes(data[1..5].try_into().unwrap()));
                state.at_end = matches!(data[0], b'a' | b'A');
                let mode = Mode::EchoThenClose(u64::from_le_bytes(data[5..HEADER].try_into().unwrap()));
                if matches!(data[0], b'n' | b'a') {
                    (mode, HEADER)
                } else {
                    let field = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                    state.pacing.take = field(HEADER) as usize;
                    state.pacing.pause_every = u64::from(field(HEADER + 4));
                    (mode, PACED_HEADER)
                }
            }
            b'e' => (Mode::Echo, 1),
            b'q' => {
                io.stop();
                (Mode::Echo, 1)
            }
            b'd' => {
                let _ = io.write(conn, &self.flood);
                io.notify_drained(conn);
                (Mode::Echo, 1)
            }
            b'z' => {
                // The last closed connection's id: its slot is this one's now.
                let stale = self.last_closed.expect("a connection closed before");
                let written = io.write(stale, b"stale");
                io.close(stale);
                self.stale = Some((written, io.state(stale).is_none(), io.buffered(stale), stale == conn));
                (Mode::Echo, 1)
            }
            b'D' => {
                io.notify_drained(conn);
                (Mode::Echo, 1)
            }
            b'w' | b'W' => {
                // A write (`w` only), the close, then writes it must refuse.
                let before = data[0] == b'w' && io.write(conn, b"before");
                io.close(conn);
                let after = io.write(conn, b"after");
                let empty_after = io.write(conn, b"");
                self.write_results.extend([before, after, empty_after]);
                (Mode::Closed, data.len())
            }
            b's' => (Mode::Sink, 1),
            b'i' => {
                let _ = io.write(conn, b"idle");
                io.close_idle(conn);
                (Mode::Closed, data.len())
            }
            b'c' => {
                io.close(conn);
                (Mode::Closed, data.len()) // what follows is ignored
            }
            b'f' | b'r' => {
                let _ = io.write(conn, &self.flood);
                self.probe.flooded.fetch_add(1, SeqCst);
                thread::sleep(self.stall);
                if data[0] == b'r' {
                    io.close(conn);
                    (Mode::Closed, data.len())
                } else {
                    (Mode::Sink, 1)
                }
            }
            other => panic!("unknown command {other}"),
        };
        state.mode = mode;
        self.probe.commands.fetch_add(1, SeqCst);
        Some(header)
    }
}

impl Handler for Cmd {
    type Conn = Tracked;
    type Message = ();

    fn on_start(&mut self, io: &mut Io<Tracked>) {
        for &addr in &self.connect_to {
            io.connect(addr, None, Tracked::new(&self.probe));
        }
    }

    fn on_accept(&mut self, _io: &mut Io<Tracked>, _conn: ConnId) -> Tracked {
        self.probe.accepted.fetch_add(1, SeqCst);
        Tracked::new(&self.probe)
    }

    fn on_connect(&mut self, _io: &mut Io<Tracked>, _conn: ConnId, _state: &mut Tracked) {
        self.probe.connected.fetch_add(1, SeqCst);
    }

    fn on_data(&mut self, io: &mut Io<Tracked>, conn: ConnId, state: &mut Tracked, data: &[u8]) -> usize {
        self.probe.delivered.fetch_add(data.len(), SeqCst);
        let mut rest = data;
        if state.mode == Mode::Undecided {
            let Some(header) = self.command(io, conn, state, data) else { return 0 };
            rest = &data[header..];
        } else if state.mode == Mode::Closed {
            self.late += 1;
        }
        let header = data.len() - rest.len();
        let pacing = &mut state.pacing;
        if pacing.take > 0 && rest.len() > pacing.take {
            rest = &rest[..pacing.take]; // the rest is offered again at once
        }
        let consumed = header + rest.len();
        if pacing.pause_every > 0 && state.mode != Mode::Closed {
            pacing.since_pause += rest.len() as u64;
            if pacing.since_pause >= pacing.pause_every {
                pacing.since_pause = 0;
                pacing.paused = true;
                io.pause_reading(conn);
                assert!(
                    io.set_deadline(conn, io.now() + Duration::from_millis(1)),
                    "an open connection takes a deadline"
                );
            }
        }
        state.calls += 1;
        let share = state.calls.is_multiple_of(2);
        match &mut state.mode {
            Mode::Echo => echo(io, conn, rest, share),
            Mode::EchoThenClose(left) => {
                let n = rest.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                *left -= n as u64;
                if state.at_end {
                    state.held.extend_from_slice(&rest[..n]);
                    self.probe.held.fetch_add(n, SeqCst);
                    if *left == 0 {
                        echo(io, conn, &std::mem::take(&mut state.held), share);
                    }
                } else {
                    echo(io, conn, &rest[..n], share);
                }
                if *left == 0 {
                    io.close(conn);
                    state.mode = Mode::Closed;
                }
            }
            Mode::Sink => self.received.extend_from_slice(rest),
            Mode::Closed | Mode::Undecided => {}
        }
        consumed
    }

    fn on_read_closed(&mut self, io: &mut Io<Tracked>, conn: ConnId, state: &mut Tracked) {
        assert!(!state.pacing.paused, "the end of input is told only while reading");
        assert!(!std::mem::replace(&mut state.told, true), "the end of input is told once");
        if state.at_end {
            echo(io, conn, &std::mem::take(&mut state.held), true);
        }
        io.shutdown_write(conn);
    }

    fn on_deadline(&mut self, io: &mut Io<Tracked>, conn: ConnId, state: &mut Tracked) {
        assert!(state.pacing.paused, "only a paused `p` connection has a deadline");
        state.pacing.paused = false;
        io.resume_reading(conn);
    }

    fn on_drained(&mut self, io: &mut Io<Tracked>, conn: ConnId, _state: &mut Tracked) {
        self.drained.push(io.buffered(conn));
        self.probe.drained.fetch_add(1, SeqCst);
    }

    fn on_close(&mut self, _io: &mut Io<Tracked>, conn: ConnId, state: Tracked, reason: &CloseReason) {
        self.last_closed = Some(conn);
        self.closes.push(reason.into());
        if let Some(tag) = state.tag {
            self.tagged.insert(tag, reason.into());
        }
        drop(state);
        self.probe.closed.fetch_add(1, SeqCst);
    }
}

/// Echoes `data`: in one copied write, or (`share`) its middle three
/// quarters as a shared buffer between two copied writes, so that it goes
/// out gathered (from about 1.4 KiB: shorter shared buffers are copied).
fn echo(io: &mut Io<Tracked>, conn: ConnId, data: &[u8], share: bool) {
    if !share {
        let _ = io.write(conn, data);
        return;
    }
    let eighth = data.len() / 8;
    let (head, rest) = data.split_at(eighth);
    let (middle, tail) = rest.split_at(rest.len() - eighth);
    let _ = io.write(conn, head) && io.write_bytes(conn, Bytes::copy_from_slice(middle)) && io.write(conn, tail);
}

/// Every close reason the loops recorded, in loop order.
fn closes(handlers: &[Cmd]) -> Vec<Reason> {
    handlers.iter().flat_map(|h| h.closes.iter().cloned()).collect()
}

// ------------------------------------------------------- partial input

/// Answers each whole line with "<n> <line>" and leaves a partial line
/// unconsumed; keeps every delivery to check what was handed back.
struct Lines {
    deliveries: Arc<Mutex<Vec<Vec<u8>>>>,
    closes: Vec<Reason>,
}

impl Handler for Lines {
    type Conn = u32; // lines answered
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<u32>, _conn: ConnId) -> u32 {
        0
    }

    fn on_data(&mut self, io: &mut Io<u32>, conn: ConnId, answered: &mut u32, data: &[u8]) -> usize {
        self.deliveries.lock().unwrap().push(data.to_vec());
        let whole = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for line in data[..whole].split_inclusive(|&b| b == b'\n') {
            *answered += 1;
            let _ = io.write(conn, format!("{answered} ").as_bytes());
            let _ = io.write(conn, line);
        }
        whole
    }

    fn on_close(&mut self, _io: &mut Io<u32>, _conn: ConnId, _answered: u32, reason: &CloseReason) {
        self.closes.push(reason.into());
    }
}

/// The unconsumed tail of a delivery to [`Lines`].
fn partial_line(delivery: &[u8]) -> &[u8] {
    &delivery[delivery.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)..]
}

fn partial_consumption(backend: Backend) {
    let deliveries = Arc::new(Mutex::new(Vec::new()));
    let shared = deliveries.clone();
    let server =
        serve(config(backend).build().unwrap(), 1, move |_| Lines { deliveries: shared.clone(), closes: Vec::new() });
    // The server holds `want` unconsumed (after its last delivery; writes
    // sent earlier may have come in the same delivery).
    let holds = |want: &[u8]| {
        let d = deliveries.clone();
        let want = want.to_vec();
        move || d.lock().unwrap().last().is_some_and(|l| partial_line(l) == want)
    };
    let mut c = connect(server.addr);
    // Byte by byte, each byte seen before the next is sent: every delivery
    // is the whole partial line so far (handed back, then extended).
    for k in 1..=5 {
        c.write_all(&b"hello"[k - 1..k]).unwrap();
        wait_until(&format!("the server holds {:?}", &"hello"[..k]), holds(&b"hello"[..k]));
    }
    // Several lines in one write, then lines split at awkward points.
    for (write, wait_for) in [
        (&b"\ntwo\nthree\nfour\n"[..], None),
        (b"fi", Some(&b"fi"[..])),
        (b"ve\nsi", None),
        (b"x\n\nsev", None),
        (b"en", None),
        (b"\n", None),
    ] {
        c.write_all(write).unwrap();
        if let Some(want) = wait_for {
            wait_until(&format!("the server holds {want:?}"), holds(want));
        }
        thread::sleep(Duration::from_millis(2));
    }
    let want = b"1 hello\n2 two\n3 three\n4 four\n5 five\n6 six\n7 \n8 seven\n";
    assert_bytes(&read_exact(&mut c, want.len()), want, "the answers");
    c.shutdown(Shutdown::Write).unwrap();
    let (rest, end) = read_to_end(&mut c);
    assert_eq!((rest.len(), end), (0, End::Eof), "nothing after the answers, then EOF");
    let finished = server.stop();
    assert_eq!(finished.handlers[0].closes, [Reason::PeerClosed]);

    // Each delivery starts with what the previous one left unconsumed, and
    // the new bytes add up to the stream exactly.
    let deliveries = deliveries.lock().unwrap();
    let first: Vec<&[u8]> = deliveries.iter().take(5).map(Vec::as_slice).collect();
    assert_eq!(first, [&b"h"[..], b"he", b"hel", b"hell", b"hello"], "{backend}: byte by byte");
    let mut stream = Vec::new();
    let mut held: &[u8] = &[];
    for d in deliveries.iter() {
        assert!(d.starts_with(held), "{backend}: {d:?} does not start with the unconsumed {held:?}");
        stream.extend_from_slice(&d[held.len()..]);
        held = partial_line(d);
    }
    assert_eq!(held, b"", "{backend}: a partial line left over");
    assert_bytes(&stream, b"hello\ntwo\nthree\nfour\nfive\nsix\n\nseven\n", "the stream as delivered");
}

// ---------------------------------------------------------- max_input

/// Consumes nothing: every delivery is all the input so far.
struct Hoard {
    sizes: Arc<Mutex<Vec<usize>>>,
    closes: Vec<Reason>,
    closed: Arc<AtomicUsize>,
}

impl Handler for Hoard {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        self.sizes.lock().unwrap().push(data.len());
        0
    }

    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.closes.push(reason.into());
        self.closed.fetch_add(1, SeqCst);
    }
}

fn hoard(backend: Backend, max_input: usize) -> (Server<Hoard>, Arc<Mutex<Vec<usize>>>, Arc<AtomicUsize>) {
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let closed = Arc::new(AtomicUsize::new(0));
    let (s, c) = (sizes.clone(), closed.clone());
    let config = config(backend).max_input(max_input).build().unwrap();
    let server = serve(config, 1, move |_| Hoard { sizes: s.clone(), closes: Vec::new(), closed: c.clone() });
    (server, sizes, closed)
}

/// max_input bytes unconsumed are allowed; one more closes with InputLimit.
fn input_limit_is_exclusive(backend: Backend) {
    let (server, sizes, closed) = hoard(backend, 1000);
    let mut c = connect(server.addr);
    c.write_all(&pattern(0, 1000)).unwrap();
    let held = |n: usize| {
        let sizes = sizes.clone();
        move || sizes.lock().unwrap().last() == Some(&n)
    };
    wait_until("1000 bytes are held", held(1000));
    c.write_all(b"!").unwrap();
    wait_count("closes", &closed, 1);
    // The connection lived to see byte 1001: the limit is "more than".
    assert_eq!(sizes.lock().unwrap().last(), Some(&1001), "{backend}: the last delivery");
    // The server read everything the client sent: its close is a FIN.
    let (got, end) = read_to_end(&mut c);
    assert_eq!((got.len(), end), (0, End::Eof), "{backend}: the client sees EOF");
    let finished = server.stop();
    assert_eq!(finished.handlers[0].closes, [Reason::InputLimit], "{backend}");
}

/// A burst far over the limit closes with InputLimit, whatever the reads.
fn input_limit_in_one_burst(backend: Backend) {
    let (server, sizes, closed) = hoard(backend, 1000);
    let mut c = connect(server.addr);
    // The server may close while this is sent: a write error is possible.
    let _ = c.write_all(&pattern(0, 20_000));
    wait_count("closes", &closed, 1);
    let (got, end) = read_to_end(&mut c);
    assert_eq!(got.len(), 0, "{backend}: no reply");
    // Data the server had not read yet when it closed makes that close a
    // reset (RFC 2525 2.17): EOF or ECONNRESET, depending on the timing.
    assert!(matches!(end, End::Eof | End::Error(ErrorKind::ConnectionReset)), "{backend}: {end:?}");
    let sizes = sizes.lock().unwrap().clone();
    let finished = server.stop();
    assert_eq!(finished.handlers[0].closes, [Reason::InputLimit], "{backend}");
    let (last, before) = sizes.split_last().expect("deliveries");
    assert!(*last > 1000 && before.iter().all(|&n| n <= 1000), "{backend}: deliveries {sizes:?}");
    assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{backend}: each delivery holds all before it: {sizes:?}");
}

// ------------------------------------------------ closing with output

/// A [`Cmd`] server with one loop whose large reply is `flood` pattern
/// bytes, and its probe.
fn cmd_server(backend: Backend, flood: usize) -> (Server<Cmd>, Arc<Probe>) {
    cmd_server_with(config(backend).build().unwrap(), flood)
}

fn cmd_server_with(config: Config, flood: usize) -> (Server<Cmd>, Arc<Probe>) {
    stalling_cmd_server(config, flood, Duration::ZERO)
}

/// The same, with an `f` command that blocks the loop for `stall`.
fn stalling_cmd_server(config: Config, flood: usize, stall: Duration) -> (Server<Cmd>, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let (p, flood) = (probe.clone(), Arc::new(pattern(0, flood)));
    (serve(config, 1, move |_| Cmd { stall, ..Cmd::new(&p).flooding(&flood) }), probe)
}

/// The handler writes 8 MiB and closes at once. The client reads slowly,
/// sends more meanwhile, then reads the rest: every byte, then EOF; none
/// of what it sent after the close is delivered.
fn close_with_pending_output(backend: Backend) {
    const REPLY: usize = 8 << 20;
    let (server, probe) = cmd_server(backend, REPLY);
    let mut c = connect(server.addr);
    c.write_all(b"r").unwrap();
    let mut got = Vec::new();
    for _ in 0..5 {
        got.extend(read_exact(&mut c, 16 << 10));
        thread::sleep(Duration::from_millis(20));
    }
    // The close was requested with the reply: this must not be delivered.
    let writer = send_in_background(&c, pattern(0, 64 << 10), 4096, false);
    let (rest, end) = read_to_end(&mut c);
    got.extend(rest);
    assert_eq!(end, End::Eof, "{backend}: the reply must end with EOF, not a reset");
    assert_bytes(&got, &pattern(0, REPLY), "the reply");
    assert_eq!(writer.join().unwrap(), None, "{backend}: the late input was discarded, not refused");
    drop(c); // EOF to the lingering server: it closes now
    wait_count("closes", &probe.closed, 1);
    let finished = server.stop();
    let h = &finished.handlers[0];
    assert_eq!(h.closes, [Reason::Local], "{backend}");
    assert_eq!(h.late, 0, "{backend}: on_data was called after close");
    assert_eq!(probe.delivered.load(SeqCst), 1, "{backend}: bytes delivered (the command only)");
    assert_eq!(finished.stats.bytes_in, 1, "{backend}: stats.bytes_in");
    assert_eq!(finished.stats.bytes_out, REPLY as u64, "{backend}: stats.bytes_out");
}

/// The handler writes 8 MiB and closes; the client never reads: after the
/// close timeout the connection closes without the rest (CloseTimeout), so
/// a peer that stops reading holds neither a descriptor nor the output.
fn close_gives_up_on_a_peer_that_does_not_read(backend: Backend) {
    let config = config(backend).close_timeout(Duration::from_millis(300)).build().unwrap();
    let (server, probe) = cmd_server_with(config, 8 << 20);
    let mut c = connect(server.addr);
    c.write_all(b"r").unwrap();
    let started = Instant::now();
    wait_count("closes", &probe.closed, 1);
    assert!(started.elapsed() >= Duration::from_millis(250), "{backend}: closed before the timeout");
    let finished = server.stop();
    assert_eq!(finished.handlers[0].closes, [Reason::Other("CloseTimeout".into())], "{backend}");
    assert!(finished.stats.bytes_out < 8 << 20, "{backend}: the peer took nothing, yet all was sent");
    drop(c);
}

/// The handler writes a reply and closes; the client keeps sending all
/// along, and for a while after the EOF: it still reads the whole reply
/// then EOF (never ECONNRESET), and its sends never fail, because the
/// server reads and discards until the client's own EOF.
fn lingering_close(backend: Backend) {
    const REPLY: usize = 300 << 10;
    let (server, probe) = cmd_server(backend, REPLY);
    let mut c = connect(server.addr);
    c.write_all(b"r").unwrap();
    // The reply has begun, so the close is requested: sending starts now.
    let mut got = read_exact(&mut c, 1024);
    let stop = Arc::new(AtomicUsize::new(0));
    let (mut w, stop_w) = (c.try_clone().unwrap(), stop.clone());
    let writer = thread::spawn(move || {
        let chunk = pattern(0, 1024);
        let mut sent = 0usize;
        // One send at least, then more until the reply is read.
        while sent == 0 || stop_w.load(SeqCst) == 0 {
            if let Err(e) = w.write_all(&chunk) {
                return Err((sent, e.kind()));
            }
            sent += chunk.len();
            thread::sleep(Duration::from_millis(1));
        }
        Ok(sent)
    });
    let (rest, end) = read_to_end(&mut c);
    got.extend(rest);
    assert_eq!(end, End::Eof, "{backend}: after {} bytes of the reply", got.len());
    assert_bytes(&got, &pattern(0, REPLY), "the reply");
    stop.store(1, SeqCst);
    let sent = writer.join().unwrap().unwrap_or_else(|(n, e)| panic!("{backend}: a send failed after {n} bytes: {e}"));
    assert!(sent >= 1024, "{backend}: {sent} bytes sent while the reply was read");
    // Lingering: the server still reads (and discards) after its FIN, so
    // sends keep working (a closed socket would answer them with RST).
    for (i, chunk) in pattern(0, 256 << 10).chunks(4096).enumerate() {
        if let Err(e) = c.write_all(chunk) {
            panic!("{backend}: send {i} after the EOF failed: {e}");
        }
        thread::sleep(Duration::from_millis(1));
    }
    c.shutdown(Shutdown::Write).unwrap();
    wait_count("closes", &probe.closed, 1);
    let finished = server.stop();
    assert_eq!(finished.handlers[0].closes, [Reason::Local], "{backend}");
    assert_eq!(finished.handlers[0].late, 0, "{backend}: on_data was called after close");
    assert_eq!(finished.stats.bytes_in, 1, "{backend}: only the command was delivered");
}

/// `Io::write` after `Io::close` returns false ("false if the connection
/// is gone or closing") and its bytes never reach the peer.
fn write_after_close_is_refused(backend: Backend) {
    write_after_close(backend, b"w", "before", [true, false, false]);
}

/// The same with nothing queued at the close (so FIN goes at once).
fn write_after_idle_close_is_refused(backend: Backend) {
    write_after_close(backend, b"W", "", [false, false, false]);
}

/// Sends `command` (`w` or `W`); the client must get `want` then EOF, the
/// writes (before the close, after it, an empty one after it) must return
/// `results`, and the close must stay Local.
fn write_after_close(backend: Backend, command: &[u8], want: &str, results: [bool; 3]) {
    let (server, probe) = cmd_server(backend, 0);
    let mut c = connect(server.addr);
    c.write_all(command).unwrap();
    let (got, end) = read_to_end(&mut c);
    drop(c);
    wait_count("closes", &probe.closed, 1);
    let finished = server.stop();
    let h = &finished.handlers[0];
    assert_eq!((String::from_utf8_lossy(&got).as_ref(), end), (want, End::Eof), "{backend}: what the client got");
    assert_eq!(h.closes, [Reason::Local], "{backend}");
    assert_eq!(h.write_results, results, "{backend}: writes before the close, after it, empty after it");
}

/// `Io::close_idle` closes as `Io::close` does (the output, then EOF),
/// with a reason and a count of its own.
fn close_idle_has_its_own_reason(backend: Backend) {
    let (server, probe) = cmd_server(backend, 0);
    let mut c = connect(server.addr);
    c.write_all(b"i").unwrap();
    let (got, end) = read_to_end(&mut c);
    drop(c);
    wait_count("closes", &probe.closed, 1);
    let finished = server.stop();
    assert_eq!((String::from_utf8_lossy(&got).as_ref(), end), ("idle", End::Eof), "{backend}: what the client got");
    assert_eq!(finished.handlers[0].closes, [Reason::Other("Idle".into())], "{backend}");
    let stats = &finished.stats;
    assert_eq!((stats.idle_closed, stats.closed_abnormally, stats.vanished), (1, 0, 0), "{backend}: the counts");
}

/// With a user timeout, a peer that takes none of 8 MiB of output (its
/// receive window stays shut) is given up by the kernel (ETIMEDOUT), on
/// every backend: the close is PeerVanished and counted as vanished.
fn a_peer_that_takes_nothing_is_timed_out(backend: Backend) {
    let config = config(backend).user_timeout(Some(Duration::from_millis(300))).build().unwrap();
    let (server, probe) = cmd_server_with(config, 8 << 20);
    let mut c = connect(server.addr);
    c.write_all(b"f").unwrap();
    let started = Instant::now();
    wait_count("closes", &probe.closed, 1);
    let took = started.elapsed();
    let finished = server.stop();
    assert_eq!(finished.handlers[0].closes, [Reason::Other("PeerVanished".into())], "{backend} after {took:?}");
    let stats = &finished.stats;
    assert_eq!((stats.vanished, stats.closed_abnormally), (1, 1), "{backend}: the counts");
    drop(c);
}

// ---------------------------------------------------------- half-close

/// The client sends 1 MiB then shuts its write side down: the echo comes
/// back whole, then EOF; the server's close is PeerClosed.
fn half_close_inbound(backend: Backend) {
    const SENT: usize = 1 << 20;
    let (server, probe) = cmd_server(backend, 0);
    let mut c = connect(server.addr);
    c.write_all(b"e").unwrap();
    let writer = send_in_background(&c, pattern(0, SENT), 10_007, true);
    let (got, end) = read_to_end(&mut c);
    assert_eq!(writer.join().unwrap(), None, "{backend}: sending");
    assert_eq!(end, End::Eof, "{backend}");
    assert_bytes(&got, &pattern(0, SENT), "the echo");
    wait_count("closes", &probe.closed, 1);
    let finished = server.stop();
    assert_eq!(closes(&finished.handlers), [Reason::PeerClosed], "{backend}");
}

/// What a client-side [`Outbound`] handler saw, in order.
#[derive(Debug, PartialEq)]
enum Seen {
    Connected,
    Data,
    /// The reason, and the state handed back (the initial bytes, then
    /// everything received).
    Closed(Reason, Vec<u8>),
}

/// Opens one connection at its start, owning `initial` as its state, and
/// writes `early` to it at once (before it is established); writes
/// `greeting` once connected; appends what arrives to its state.
/// `close_at_once` closes it right after the connect call.
struct Outbound {
    target: SocketAddr,
    initial: Vec<u8>,
    early: Vec<u8>,
    greeting: Vec<u8>,
    close_at_once: bool,
    seen: Vec<Seen>,
    id: Option<ConnId>,
    closed_id: Option<ConnId>,
    /// What the write of `early` returned.
    early_written: Option<bool>,
}

impl Outbound {
    fn new(target: SocketAddr, initial: &[u8], greeting: &[u8]) -> Outbound {
        Outbound {
            target,
            initial: initial.to_vec(),
            early: Vec::new(),
            greeting: greeting.to_vec(),
            close_at_once: false,
            seen: Vec::new(),
            id: None,
            closed_id: None,
            early_written: None,
        }
    }
}

impl Handler for Outbound {
    type Conn = Vec<u8>;
    type Message = ();

    fn on_start(&mut self, io: &mut Io<Vec<u8>>) {
        let id = io.connect(self.target, None, self.initial.clone());
        self.id = Some(id);
        if !self.early.is_empty() {
            self.early_written = Some(io.write(id, &self.early));
        }
        if self.close_at_once {
            io.close(id);
        }
    }

    fn on_accept(&mut self, _io: &mut Io<Vec<u8>>, _conn: ConnId) -> Vec<u8> {
        unreachable!("a client accepts nothing")
    }

    fn on_connect(&mut self, io: &mut Io<Vec<u8>>, conn: ConnId, _state: &mut Vec<u8>) {
        self.seen.push(Seen::Connected);
        let _ = io.write(conn, &self.greeting);
    }

    fn on_data(&mut self, _io: &mut Io<Vec<u8>>, _conn: ConnId, state: &mut Vec<u8>, data: &[u8]) -> usize {
        if self.seen.last() != Some(&Seen::Data) {
            self.seen.push(Seen::Data);
        }
        state.extend_from_slice(data);
        data.len()
    }

    fn on_close(&mut self, _io: &mut Io<Vec<u8>>, conn: ConnId, state: Vec<u8>, reason: &CloseReason) {
        self.closed_id = Some(conn);
        self.seen.push(Seen::Closed(reason.into(), state));
    }
}

/// An outbound connection whose peer sends 512 KiB then shuts its write
/// side down: the handler receives it all, then closes with PeerClosed;
/// the peer gets the greeting, then EOF. The client runtime then ends by
/// itself.
fn half_close_outbound(backend: Backend) {
    const SENT: usize = 512 << 10;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let mut s = accept_within(&listener);
        s.write_all(&pattern(0, SENT)).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        read_to_end(&mut s)
    });
    let finished = run_client(config(backend).build().unwrap(), move |_| Outbound::new(target, b"", b"hello"));
    let (got, end) = peer.join().unwrap();
    assert_eq!((got.as_slice(), end), (&b"hello"[..], End::Eof), "{backend}: what the peer got");
    let h = &finished.handlers[0];
    let names: Vec<String> = h.seen.iter().map(|s| format!("{s:?}").chars().take(40).collect()).collect();
    assert_eq!(h.seen.len(), 3, "{backend}: {names:?}");
    assert_eq!(h.seen[..2], [Seen::Connected, Seen::Data], "{backend}");
    let Seen::Closed(reason, state) = &h.seen[2] else { panic!("{backend}: no close") };
    assert_eq!(*reason, Reason::PeerClosed, "{backend}");
    assert_bytes(state, &pattern(0, SENT), "what the handler received");
    assert_eq!(h.closed_id, h.id, "{backend}: on_close names the connection connect returned");
    assert_eq!((finished.stats.connected, finished.stats.closed), (1, 1), "{backend}");
}

/// Bytes written right after `connect`, before the connection is
/// established, go out once it is, before those written in on_connect.
fn writes_before_connect_go_out_after_it(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    let peer = thread::spawn(move || {
        let mut s = accept_within(&listener);
        let got = read_exact(&mut s, 9);
        drop(s); // FIN: the handler's connection ends with PeerClosed
        got
    });
    let finished = run_client(config(backend).build().unwrap(), move |_| Outbound {
        early: b"early".to_vec(),
        ..Outbound::new(target, b"", b"late")
    });
    assert_eq!(peer.join().unwrap(), b"earlylate", "{backend}: what the peer got");
    let h = &finished.handlers[0];
    assert_eq!(h.early_written, Some(true), "{backend}: a write to a connection being established");
    assert_eq!(h.seen, [Seen::Connected, Seen::Closed(Reason::PeerClosed, Vec::new())], "{backend}");
}

/// `close` right after `connect`: on_close with Local and the state, no
/// on_connect; the client runtime ends by itself.
fn close_while_connecting(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    let finished = run_client(config(backend).build().unwrap(), move |_| Outbound {
        close_at_once: true,
        ..Outbound::new(target, b"mine", b"hello")
    });
    let h = &finished.handlers[0];
    assert_eq!(h.seen, [Seen::Closed(Reason::Local, b"mine".to_vec())], "{backend}");
    assert_eq!(h.closed_id, h.id, "{backend}");
    drop(listener);
}

// -------------------------------------------------------------- resets

/// A [`Cmd`] server and a client that sends `command`, reads `read_first`
/// bytes, sends `send_after` more, then closes with a reset.
fn reset_by_client(
    backend: Backend,
    flood: usize,
    command: &[u8],
    send_after: usize,
    read_first: usize,
) -> Finished<Cmd> {
    let (server, probe) = cmd_server(backend, flood);
    let mut c = connect(server.addr);
    c.write_all(command).unwrap();
    read_exact(&mut c, read_first);
    if send_after > 0 {
        c.write_all(&pattern(0, send_after)).unwrap();
    }
    reset(c);
    // An RST makes the server's next read, receive or send fail with
    // ECONNRESET (a send may say EPIPE): CloseReason::Reset either way.
    wait_count("closes", &probe.closed, 1);
    server.stop()
}

/// Echo, read the echo, then reset with nothing pending anywhere.
fn reset_after_echo(backend: Backend) {
    let finished = reset_by_client(backend, 0, b"eping", 0, 4);
    assert_eq!(closes(&finished.handlers), [Reason::Reset], "{backend}");
}

/// Send 256 KiB and reset at once: the server may still hold some of it
/// unread. What was delivered is a prefix of what was sent, then Reset.
fn reset_with_data_in_flight(backend: Backend) {
    let finished = reset_by_client(backend, 0, b"s", 256 << 10, 0);
    let h = &finished.handlers[0];
    assert_eq!(h.closes, [Reason::Reset], "{backend}");
    assert_bytes(&h.received, &pattern(0, h.received.len()), "what was delivered before the reset");
}

/// The server is sending 8 MiB when the client resets after 1 KiB.
fn reset_while_output_pending(backend: Backend) {
    let finished = reset_by_client(backend, 8 << 20, b"f", 0, 1024);
    assert_eq!(closes(&finished.handlers), [Reason::Reset], "{backend}");
    assert!(finished.stats.bytes_out < 8 << 20, "{backend}: all 8 MiB sent to a reset peer?");
}

// -------------------------------------------------------------- timers

/// Sets timers at its start (deadlines relative to then), cancels some,
/// and records when each fires.
#[derive(Default)]
struct Timers {
    start: Option<Instant>,
    ids: HashMap<u64, TimerId>,
    due: HashMap<u64, Instant>,
    /// (token, the loop's clock, the real clock) at each firing.
    fired: Vec<(u64, Instant, Instant)>,
    cancels: Vec<(&'static str, bool)>,
}

impl Timers {
    fn set(&mut self, io: &mut Io<()>, after_ms: i64, token: u64) {
        let start = self.start.unwrap();
        let at = if after_ms >= 0 {
            start + Duration::from_millis(after_ms as u64)
        } else {
            start - Duration::from_millis(after_ms.unsigned_abs())
        };
        self.due.insert(token, at);
        self.ids.insert(token, io.set_timer(at, token));
    }

    fn cancel(&mut self, io: &mut Io<()>, what: &'static str, token: u64) {
        let done = io.cancel_timer(self.ids[&token]);
        self.cancels.push((what, done));
    }
}

impl Handler for Timers {
    type Conn = ();
    type Message = ();

    fn on_start(&mut self, io: &mut Io<()>) {
        self.start = Some(Instant::now());
        for (after_ms, token) in [(30, 3), (10, 1), (20, 2), (20, 22), (15, 99), (5, 5), (40, 4), (-1, 0)] {
            self.set(io, after_ms, token);
        }
        self.cancel(io, "cancel 99", 99);
        self.cancel(io, "cancel 99 again", 99);
    }

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {
        unreachable!("no listener")
    }

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), _data: &[u8]) -> usize {
        unreachable!("no connection")
    }

    fn on_timer(&mut self, io: &mut Io<()>, timer: TimerId, token: u64) {
        self.fired.push((token, io.now(), Instant::now()));
        assert_eq!(Some(&timer), self.ids.get(&token), "on_timer names the timer set_timer returned");
        match token {
            5 => {
                self.cancel(io, "cancel 4 (pending)", 4);
                self.cancel(io, "cancel 5 (firing now)", 5);
            }
            // A timer set from a timer: after 3 (30 ms), before 4 (40 ms,
            // cancelled), whatever the delays.
            1 => self.set(io, 35, 11),
            11 => {
                self.cancel(io, "cancel 3 (fired)", 3);
                self.cancel(io, "cancel 4 (cancelled)", 4);
            }
            _ => {}
        }
    }
}

/// Timers fire at or after their deadline, in deadline order (then in the
/// order they were set), with their tokens; a cancelled one never fires;
/// cancel_timer says false for a fired or cancelled one. The client-only
/// runtime ends by itself once no timer is left.
fn timers(backend: Backend) {
    let began = Instant::now();
    let finished = run_client(config(backend).build().unwrap(), |_| Timers::default());
    let h = &finished.handlers[0];
    let order: Vec<u64> = h.fired.iter().map(|f| f.0).collect();
    assert_eq!(order, [0, 5, 1, 2, 22, 3, 11], "{backend}: firing order");
    for &(token, loop_now, now) in &h.fired {
        let due = h.due[&token];
        assert!(loop_now >= due && now >= due, "{backend}: timer {token} fired {:?} early", due - loop_now.min(now));
    }
    let want = [
        ("cancel 99", true),
        ("cancel 99 again", false),
        ("cancel 4 (pending)", true),
        ("cancel 5 (firing now)", false),
        ("cancel 3 (fired)", false),
        ("cancel 4 (cancelled)", false),
    ];
    assert_eq!(h.cancels, want, "{backend}");
    assert!(began.elapsed() >= Duration::from_millis(35), "{backend}: ended before the last timer was due");
}

// ------------------------------------------------ per-connection state

/// Many connections with mixed endings over two loops; each loop also
/// opens outbound connections (one to a closed port). Every state made is
/// handed to on_close once and dropped once.
fn state_made_and_dropped_once(backend: Backend) {
    const LOOPS: usize = 2;
    const EACH: usize = 4;
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let probe = Arc::new(Probe::default());
    let config = config(backend).drain_timeout(Duration::from_millis(300)).build().unwrap();
    let (p, targets) = (probe.clone(), vec![peer.local_addr().unwrap(), peer.local_addr().unwrap(), closed_port()]);
    let flood = Arc::new(pattern(0, 16 << 20));
    let server = serve(config, LOOPS, move |_| Cmd { connect_to: targets.clone(), ..Cmd::new(&p).flooding(&flood) });
    let mut open = Vec::new();
    for i in 0..EACH {
        // Peer close: FIN after the echo.
        let mut c = connect(server.addr);
        c.write_all(b"e1").unwrap();
        read_exact(&mut c, 1);
        drop(c);
        // Local close: the server closes; we read its EOF, then close.
        let mut c = connect(server.addr);
        c.write_all(b"c").unwrap();
        assert_eq!(read_to_end(&mut c), (Vec::new(), End::Eof), "{backend}: local close {i}");
        drop(c);
        // Reset.
        let mut c = connect(server.addr);
        c.write_all(b"e2").unwrap();
        read_exact(&mut c, 1);
        reset(c);
        // Open at the stop: idle, or with output pending (never read).
        let mut c = connect(server.addr);
        c.write_all(if i % 2 == 0 { b"e3" } else { b"f" }).unwrap();
        if i % 2 == 0 {
            read_exact(&mut c, 1);
        }
        open.push(c);
    }
    // Outbound: the first of each loop's two is closed by its peer, the
    // other stays open until the stop.
    let mut outbound: Vec<_> = (0..2 * LOOPS).map(|_| accept_within(&peer)).collect();
    let kept = outbound.split_off(LOOPS);
    wait_count("outbound connects", &probe.connected, 2 * LOOPS);
    wait_count("accepts", &probe.accepted, 4 * EACH);
    wait_count("flood replies", &probe.flooded, EACH / 2);
    drop(outbound);
    // Closed before the stop: peer, local, reset, failed connects, the
    // outbound connections whose peer closed.
    wait_count("closes", &probe.closed, 3 * EACH + 2 * LOOPS);
    let finished = server.stop();
    drop((open, kept));
    let made = probe.created.load(SeqCst);
    assert_eq!(made, 4 * EACH + 3 * LOOPS, "{backend}: states made");
    assert_eq!(probe.closed.load(SeqCst), made, "{backend}: on_close calls");
    assert_eq!(probe.dropped.load(SeqCst), made, "{backend}: states dropped");
    assert_eq!(finished.handlers.len(), LOOPS);
    let mut reasons = closes(&finished.handlers);
    reasons.sort();
    let mut want = [
        vec![Reason::PeerClosed; EACH + LOOPS],
        vec![Reason::Local; EACH],
        vec![Reason::Reset; EACH],
        vec![Reason::Shutdown; EACH + LOOPS],
        vec![Reason::ConnectFailed(Some(libc::ECONNREFUSED)); LOOPS],
    ]
    .concat();
    want.sort();
    assert_eq!(reasons, want, "{backend}");
    assert_eq!(finished.stats.closed as usize, made, "{backend}: stats.closed");
}

// ---------------------------------------------------------------- stop

/// A stop with 4 MiB queued for a client that has not read yet: the
/// client then reads every byte, then EOF; the close is Shutdown, and the
/// listener is gone once the runtime has ended.
fn stop_drains_pending_output(backend: Backend) {
    const REPLY: usize = 4 << 20;
    let (server, probe) = cmd_server(backend, REPLY);
    let addr = server.addr;
    let mut c = connect(addr);
    c.write_all(b"f").unwrap();
    wait_count("flood replies", &probe.flooded, 1);
    server.control.stop();
    let (got, end) = read_to_end(&mut c);
    assert_eq!(end, End::Eof, "{backend}: after {} bytes", got.len());
    assert_bytes(&got, &pattern(0, REPLY), "the output pending at the stop");
    drop(c);
    let finished = server.finish();
    assert_eq!(closes(&finished.handlers), [Reason::Shutdown], "{backend}");
    let refused = std::net::TcpStream::connect_timeout(&addr, LIMIT).map(drop).map_err(|e| e.kind());
    assert_eq!(refused, Err(ErrorKind::ConnectionRefused), "{backend}: connecting after the runtime ended");
}

/// A stop with 16 MiB queued for a client that never reads: the loop
/// gives up at the drain timeout (Shutdown); the client then gets a
/// prefix of the output (what the kernel already held), then EOF.
fn stop_gives_up_at_the_drain_timeout(backend: Backend) {
    const REPLY: usize = 16 << 20;
    const DRAIN: Duration = Duration::from_millis(200);
    let (server, probe) = cmd_server_with(config(backend).drain_timeout(DRAIN).build().unwrap(), REPLY);
    let mut c = connect(server.addr);
    // The turn that reads the command may also see the stop, and its clock
    // was read before: count from the send (see the next test).
    let sent = Instant::now();
    c.write_all(b"f").unwrap();
    wait_count("flood replies", &probe.flooded, 1);
    let finished = server.stop();
    let took = sent.elapsed();
    assert!(took >= DRAIN, "{backend}: ended {took:?} after the command, before the drain timeout");
    assert_eq!(closes(&finished.handlers), [Reason::Shutdown], "{backend}");
    let (got, end) = read_to_end(&mut c);
    assert_eq!(end, End::Eof, "{backend}: after {} bytes", got.len());
    assert!(got.len() < REPLY, "{backend}: all of it went out?");
    assert_bytes(&got, &pattern(0, got.len()), "the prefix");
}

/// The drain timeout runs from the stop, however long the loop's turn
/// was: the `f` callback blocks the loop for 1.5 s and the stop comes
/// during it; with a 1 s drain timeout, a client that starts reading at
/// the stop still has a second to take 16 MiB, and gets every byte.
fn drain_timeout_counts_from_the_stop(backend: Backend) {
    const REPLY: usize = 16 << 20;
    let config = config(backend).drain_timeout(Duration::from_secs(1)).build().unwrap();
    let (server, probe) = stalling_cmd_server(config, REPLY, Duration::from_millis(1500));
    let mut c = connect(server.addr);
    c.write_all(b"f").unwrap();
    wait_count("flood replies", &probe.flooded, 1);
    server.control.stop(); // while the callback blocks the loop
    let (got, end) = read_to_end(&mut c);
    assert_eq!(end, End::Eof, "{backend}: after {} bytes", got.len());
    assert_bytes(&got, &pattern(0, REPLY), "the output pending at the stop");
    let finished = server.finish();
    assert_eq!(closes(&finished.handlers), [Reason::Shutdown], "{backend}");
}

/// Two loops serving one listener made with std: every client is served.
fn serves_a_listener_made_elsewhere(backend: Backend) {
    const CLIENTS: usize = 20;
    let probe = Arc::new(Probe::default());
    let p = probe.clone();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = serve_listener(config(backend).build().unwrap(), 2, listener, move |_| Cmd::new(&p));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let mut c = connect(server.addr);
            c.write_all(format!("e{i:02}").as_bytes()).unwrap();
            c
        })
        .collect();
    for (i, mut c) in clients.into_iter().enumerate() {
        assert_eq!(read_exact(&mut c, 2), format!("{i:02}").as_bytes(), "{backend}: client {i}");
    }
    wait_count("closes", &probe.closed, CLIENTS);
    let finished = server.stop();
    assert_eq!(closes(&finished.handlers), vec![Reason::PeerClosed; CLIENTS], "{backend}");
    assert_eq!(finished.handlers.len(), 2);
    assert_eq!(finished.stats.accepted as usize, CLIENTS);
}

/// `Runtime::reuse_port`: two one-loop runtimes (as two processes would)
/// listen on one address and both get connections; without it the second
/// bind is refused. One backend: this is about the listener, not the loop.
#[test]
fn reuse_port_shares_an_address_between_runtimes() {
    use iomux::runtime::Runtime;
    let runtime = || Runtime::new(config(Backend::Epoll).build().unwrap(), 1).unwrap();
    let first = runtime().reuse_port().bind("127.0.0.1:0".parse().unwrap()).expect("bind with reuse_port");
    let addr = first.local_addr().unwrap();
    assert!(runtime().bind(addr).is_err(), "without reuse_port the address is in use");
    let second = runtime().reuse_port().bind(addr).expect("join the first listener's address");
    let probes = [Arc::new(Probe::default()), Arc::new(Probe::default())];
    let mut running = Vec::new();
    for (runtime, probe) in [first, second].into_iter().zip(&probes) {
        let p = probe.clone();
        running.push(start(runtime, move |_| Cmd::new(&p)));
    }
    // The kernel hashes each connection's 4-tuple over the two listeners:
    // 40 connections all landing on one has odds of 2^-39.
    const CLIENTS: usize = 40;
    for i in 0..CLIENTS {
        let mut c = connect(addr);
        c.write_all(format!("e{i:02}").as_bytes()).unwrap();
        assert_eq!(read_exact(&mut c, 2), format!("{i:02}").as_bytes(), "client {i}");
    }
    let accepted: Vec<usize> = probes.iter().map(|p| p.accepted.load(SeqCst)).collect();
    assert_eq!(accepted.iter().sum::<usize>(), CLIENTS, "{accepted:?}");
    assert!(accepted.iter().all(|&n| n > 0), "one runtime got every connection: {accepted:?}");
    for server in running {
        server.stop();
    }
}

/// `Io::stop` from a callback stops the loop as `Control::stop` would:
/// idle connections close with Shutdown and the runtime ends by itself.
fn stop_from_a_handler(backend: Backend) {
    let (server, probe) = cmd_server(backend, 0);
    let mut idle = connect(server.addr);
    idle.write_all(b"e1").unwrap();
    read_exact(&mut idle, 1);
    let mut stopper = connect(server.addr);
    stopper.write_all(b"q").unwrap();
    for c in [&mut idle, &mut stopper] {
        assert_eq!(read_to_end(c), (Vec::new(), End::Eof), "{backend}: a connection at the stop");
    }
    let finished = server.finish(); // no Control::stop
    assert_eq!(closes(&finished.handlers), [Reason::Shutdown, Reason::Shutdown], "{backend}");
    assert_eq!(probe.accepted.load(SeqCst), 2);
}

/// on_drained comes once, when the output is empty: after 2 MiB are out,
/// or on a later turn when nothing was queued.
fn drained_notice_once_output_is_out(backend: Backend) {
    const REPLY: usize = 2 << 20;
    let (server, probe) = cmd_server(backend, REPLY);
    let mut c = connect(server.addr);
    c.write_all(b"d").unwrap();
    assert_bytes(&read_exact(&mut c, REPLY), &pattern(0, REPLY), "the reply");
    wait_count("drained notices", &probe.drained, 1);
    let mut idle = connect(server.addr);
    idle.write_all(b"D").unwrap();
    wait_count("drained notices", &probe.drained, 2);
    // Echoes after the notice: no second one.
    for round in 0..3u8 {
        c.write_all(&[round]).unwrap();
        assert_eq!(read_exact(&mut c, 1), [round]);
    }
    let finished = server.stop();
    assert_eq!(finished.handlers[0].drained, [0, 0], "{backend}: buffered bytes at each notice");
}

/// With max_conns 2, a third connection waits (in the kernel's backlog)
/// until one of the two closes; then it is served.
fn max_conns_pauses_accepting(backend: Backend) {
    let config = config(backend).max_conns(2).build().unwrap();
    let (server, probe) = cmd_server_with(config, 0);
    let mut first = connect(server.addr);
    first.write_all(b"ea").unwrap();
    assert_eq!(read_exact(&mut first, 1), b"a");
    let mut second = connect(server.addr);
    second.write_all(b"eb").unwrap();
    assert_eq!(read_exact(&mut second, 1), b"b");
    let mut third = connect(server.addr); // the kernel completes the handshake
    third.write_all(b"ec").unwrap();
    drop(first);
    assert_eq!(read_exact(&mut third, 1), b"c", "{backend}: the third, once the first closed");
    assert_eq!(probe.accepted.load(SeqCst), 3);
    let finished = server.stop();
    // Never more than two at once, however early the third was offered.
    assert_eq!(finished.stats.peak_conns, 2, "{backend}: accepted past max_conns");
    let mut reasons = closes(&finished.handlers);
    reasons.sort();
    assert_eq!(reasons, [Reason::PeerClosed, Reason::Shutdown, Reason::Shutdown], "{backend}");
    drop((second, third));
}

/// The id of a closed connection reaches nothing, not even the
/// connection that took its slot: a write says false, close does nothing.
fn stale_ids_reach_nothing(backend: Backend) {
    let (server, probe) = cmd_server(backend, 0);
    let mut first = connect(server.addr);
    first.write_all(b"c").unwrap();
    assert_eq!(read_to_end(&mut first), (Vec::new(), End::Eof));
    drop(first);
    wait_count("closes", &probe.closed, 1);
    let mut second = connect(server.addr);
    second.write_all(b"z").unwrap();
    second.write_all(b"x").unwrap();
    assert_eq!(read_exact(&mut second, 1), b"x", "{backend}: the live connection's echo, nothing stale");
    second.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut second), (Vec::new(), End::Eof), "{backend}");
    wait_count("closes", &probe.closed, 2);
    let finished = server.stop();
    let h = &finished.handlers[0];
    assert_eq!(h.stale, Some((false, true, 0, false)), "{backend}: write, state gone, buffered, same id");
    assert_eq!(h.closes, [Reason::Local, Reason::PeerClosed], "{backend}: the live one was not closed by the stale id");
}

// ------------------------------------------------------- connect fails

/// A connect to a closed port: on_close with ConnectFailed(ECONNREFUSED),
/// the state handed back untouched, no on_connect, no data.
fn connect_refused(backend: Backend) {
    let target = closed_port();
    let finished = run_client(config(backend).build().unwrap(), move |_| Outbound::new(target, b"mine", b"hello"));
    let h = &finished.handlers[0];
    assert_eq!(h.seen, [Seen::Closed(Reason::ConnectFailed(Some(libc::ECONNREFUSED)), b"mine".to_vec())], "{backend}");
    assert_eq!(h.closed_id, h.id, "{backend}: on_close names the connection connect returned");
    assert_eq!((finished.stats.connected, finished.stats.closed_abnormally), (0, 1), "{backend}");
}

// ------------------------------------------------------- property test

/// One client action.
#[derive(Clone, Debug)]
enum Step {
    /// Send this many bytes (the next of the connection's pattern).
    Send(usize),
    /// Wait this many milliseconds.
    Pause(u64),
}

/// One connection: what the server does, what the client sends, and
/// whether the client shuts its write side down after its last step.
#[derive(Clone, Debug)]
struct Plan {
    /// The server echoes this many bytes, then closes (None: echoes all).
    close_after: Option<u64>,
    steps: Vec<Step>,
    /// Else the client holds the connection open until the server stops.
    shutdown: bool,
    /// The client reads in small pieces, pausing after each.
    slow_reader: bool,
    /// The server takes at most this many bytes a call, and pauses its
    /// reading for 1 ms after every so many bytes (`p` command); None:
    /// all at once, never paused (`n`).
    pacing: Option<(u32, u32)>,
    /// The server holds its echo until the client's end of input or its
    /// own close (`a`, `A`).
    at_end: bool,
}

/// What a connection looked like from outside; the same on every backend.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// Bytes the client received.
    received: usize,
    /// They are the first `received` bytes the client sent.
    intact: bool,
    /// How the client's reading ended.
    end: End,
    /// Every send of the client succeeded.
    sends_ok: bool,
    /// The server's close reason.
    reason: Reason,
}

impl Plan {
    fn sent(&self) -> usize {
        self.steps.iter().map(|s| if let Step::Send(n) = s { *n } else { 0 }).sum()
    }

    /// What the client gets back before the stop, on a connection the
    /// stop ends.
    fn echoed_before_stop(&self) -> usize {
        if self.at_end {
            0
        } else {
            self.sent()
        }
    }

    /// Where the server closes, if the client sends that much.
    fn server_closes_at(&self) -> Option<usize> {
        self.close_after.map(|n| n as usize).filter(|&n| n <= self.sent())
    }

    /// The connection ends before the stop: the server closes it, or the
    /// client's EOF does.
    fn ends_before_stop(&self) -> bool {
        self.shutdown || self.server_closes_at().is_some()
    }

    /// The model, from the documented semantics:
    /// - the server closes after N bytes: the client gets exactly the
    ///   first N bytes, then EOF (the close waits for the output, then
    ///   FIN; what the client sends after is discarded, never answered
    ///   with a reset, so its sends all succeed); the reason is Local;
    /// - else the client gets its every byte back, then EOF: after its own
    ///   shutdown (the server flushes, then closes: PeerClosed), or after
    ///   the server's stop (an idle connection: Shutdown);
    /// - a server that holds its echo to the end of input answers the
    ///   same, all at the end; without an end of input or a close of its
    ///   own, the stop comes first, and it answers nothing.
    fn expected(&self) -> Outcome {
        let (received, reason) = match self.server_closes_at() {
            Some(n) => (n, Reason::Local),
            None if self.shutdown => (self.sent(), Reason::PeerClosed),
            None => (self.echoed_before_stop(), Reason::Shutdown),
        };
        Outcome { received, intact: true, end: End::Eof, sends_ok: true, reason }
    }
}

fn plan() -> impl Strategy<Value = Plan> {
    let step = prop_oneof![4 => (1usize..70_000).prop_map(Step::Send), 1 => (0u64..4).prop_map(Step::Pause)];
    // A take of a few hundred bytes and a pause every few dozen KiB: a
    // few thousand calls and a few dozen pauses at most.
    let pacing = prop_oneof![Just(None), (prop_oneof![Just(0u32), 256u32..5000], 16_384u32..100_000).prop_map(Some)];
    (proptest::collection::vec(step, 1..6), any::<bool>(), any::<bool>(), pacing, any::<bool>())
        .prop_flat_map(|(steps, shutdown, slow_reader, pacing, at_end)| {
            let plan = Plan { close_after: None, steps, shutdown, slow_reader, pacing, at_end };
            let sent = plan.sent() as u64;
            // Often within the traffic (0 closes at the header), sometimes
            // exactly at its end, sometimes past it.
            let close = prop_oneof![Just(None), (0..=sent + 20_000).prop_map(Some), Just(Some(sent))];
            (Just(plan), close)
        })
        .prop_map(|(plan, close_after)| Plan { close_after, ..plan })
}

/// Reads up to `n` bytes (usize::MAX: to the end); stops early at EOF or
/// an error (a timeout included). A slow reader reads 4 KiB at a time
/// and pauses a millisecond after each read, so the server's output
/// backs up.
fn read_paced(s: &mut std::net::TcpStream, n: usize, slow: bool) -> (Vec<u8>, Option<End>) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; if slow { 4 << 10 } else { 64 << 10 }];
    while got.len() < n {
        let want = buf.len().min(n - got.len());
        match s.read(&mut buf[..want]) {
            Ok(0) => return (got, Some(End::Eof)),
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return (got, Some(End::Error(e.kind()))),
        }
        if slow {
            thread::sleep(Duration::from_millis(1));
        }
    }
    (got, None)
}

/// The client side of one connection. A held connection reports through
/// `through` once it has its echo, then waits for `go` (the stop).
fn drive(addr: SocketAddr, tag: u32, plan: Plan, through: Arc<AtomicUsize>, go: mpsc::Receiver<()>) -> (Outcome, u32) {
    let mut s = connect(addr);
    let base = tag as usize * 1_000_003; // a stream of its own
    let command = match (plan.pacing.is_some(), plan.at_end) {
        (false, false) => b'n',
        (true, false) => b'p',
        (false, true) => b'a',
        (true, true) => b'A',
    };
    let mut header = vec![command];
    header.extend(tag.to_le_bytes());
    header.extend(plan.close_after.unwrap_or(u64::MAX).to_le_bytes());
    if let Some((take, pause_every)) = plan.pacing {
        header.extend(take.to_le_bytes());
        header.extend(pause_every.to_le_bytes());
    }
    let mut w = s.try_clone().expect("clone");
    let (steps, shutdown) = (plan.steps.clone(), plan.shutdown);
    let writer = thread::spawn(move || -> std::io::Result<()> {
        w.write_all(&header)?;
        let mut offset = 0;
        for step in steps {
            match step {
                Step::Send(n) => {
                    w.write_all(&pattern(base + offset, n))?;
                    offset += n;
                }
                Step::Pause(ms) => thread::sleep(Duration::from_millis(ms)),
            }
        }
        if shutdown {
            w.shutdown(Shutdown::Write)?;
        }
        Ok(())
    });
    let (received, end) = if plan.ends_before_stop() {
        read_paced(&mut s, usize::MAX, plan.slow_reader)
    } else {
        let (mut got, early) = read_paced(&mut s, plan.echoed_before_stop(), plan.slow_reader);
        through.fetch_add(1, SeqCst);
        let _ = go.recv_timeout(LIMIT);
        let end = early.or_else(|| {
            let (rest, end) = read_paced(&mut s, usize::MAX, false);
            got.extend(rest);
            end
        });
        (got, end)
    };
    let end = end.expect("read to the end");
    let sends_ok = writer.join().expect("writer").is_ok();
    drop(s); // our EOF: a lingering server closes now
    if plan.ends_before_stop() {
        through.fetch_add(1, SeqCst);
    }
    let intact = received == pattern(base, received.len());
    (Outcome { received: received.len(), intact, end, sends_ok, reason: Reason::Other("not closed".into()) }, tag)
}

/// Runs every plan at once, one connection each, against one server on
/// `backend` whose reads come in `read_size` pieces (io_uring: `ring`
/// buffers of that size) and whose output bound is `max_output`; with
/// `every_uring_feature`, every optional io_uring feature on.
fn run_plans(
    backend: Backend,
    plans: &[Plan],
    read_size: usize,
    ring: u16,
    max_output: usize,
    every_uring_feature: bool,
) -> Vec<Outcome> {
    let mut config = config(backend);
    if every_uring_feature {
        config = config
            .uring_register_ring(true)
            .uring_min_wait(Duration::from_micros(100))
            .uring_bundle(true)
            .uring_buf_inc(true)
            .uring_send_zc_min(4096);
    }
    let config = config
        .read_buffer(read_size)
        .ring_buffer_size(read_size)
        .ring_buffers(ring)
        .max_output(max_output)
        // Long enough never to decide an outcome: ends come from the peers.
        .linger(Duration::from_secs(30))
        .drain_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let (server, probe) = cmd_server_with(config, 0);
    let through = Arc::new(AtomicUsize::new(0));
    let mut go = Vec::new();
    let clients: Vec<_> = plans
        .iter()
        .enumerate()
        .map(|(tag, plan)| {
            let (tx, rx) = mpsc::channel();
            go.push(tx);
            let (addr, plan, through) = (server.addr, plan.clone(), through.clone());
            thread::spawn(move || drive(addr, tag as u32, plan, through, rx))
        })
        .collect();
    wait_count("clients through their traffic", &through, plans.len());
    // A connection that sent nothing but its header is through at once:
    // the stop must not come before the server has seen the header.
    wait_count("headers", &probe.commands, plans.len());
    let before_stop = plans.iter().filter(|p| p.ends_before_stop()).count();
    wait_count("closes before the stop", &probe.closed, before_stop);
    // A server holding its echo has answered nothing yet: the stop must
    // not come before it has taken every byte (a stop closes a connection
    // with nothing to send at once, resetting a client still sending).
    let held: usize = plans.iter().filter(|p| p.at_end).map(|p| p.server_closes_at().unwrap_or(p.sent())).sum();
    wait_count("bytes held to the end of input", &probe.held, held);
    server.control.stop();
    for tx in go {
        let _ = tx.send(());
    }
    let mut outcomes: Vec<Outcome> = clients.into_iter().map(|c| c.join().expect("client")).map(|(o, _)| o).collect();
    let finished = server.finish();
    let h = &finished.handlers[0];
    assert_eq!(h.late, 0, "{backend}: on_data after close");
    for (tag, outcome) in outcomes.iter_mut().enumerate() {
        if let Some(reason) = h.tagged.get(&(tag as u32)) {
            outcome.reason = reason.clone();
        }
    }
    outcomes
}

/// 1 to 5 connections' plans, and the server's read size (io_uring: ring
/// buffer size), ring buffer count and output bound.
fn traffic() -> impl Strategy<Value = (Vec<Plan>, usize, u16, usize)> {
    (
        proptest::collection::vec(plan(), 1..6),
        prop_oneof![Just(512usize), Just(4096), Just(65536)],
        prop_oneof![Just(2u16), Just(1024)],
        prop_oneof![Just(16usize << 10), Just(4 << 20)],
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 32,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random traffic on 1 to 5 connections at once, run on every backend,
    /// some with a server that takes its input a piece per call and pauses
    /// its reading, resumed by a deadline: each matches the model, so all
    /// give the same outcome.
    #[test]
    fn every_backend_matches_the_model((plans, read_size, ring, max_output) in traffic()) {
        let want: Vec<Outcome> = plans.iter().map(Plan::expected).collect();
        for &backend in Backend::ALL {
            let got = run_plans(backend, &plans, read_size, ring, max_output, false);
            prop_assert_eq!(&got, &want, "{}: plans {:?}", backend, plans);
        }
    }

    /// The same with every optional io_uring feature on (bundles,
    /// incremental buffers, zero-copy sends, batched waits, registered
    /// ring): the same outcomes.
    #[test]
    fn uring_features_match_the_model((plans, read_size, ring, max_output) in traffic()) {
        let want: Vec<Outcome> = plans.iter().map(Plan::expected).collect();
        for backend in [Backend::Uring, Backend::UringSqpoll] {
            let got = run_plans(backend, &plans, read_size, ring, max_output, true);
            prop_assert_eq!(&got, &want, "{} with every feature: plans {:?}", backend, plans);
        }
    }
}

// ------------------------------------------- one request per call, backpressure

/// Takes one line per call and answers it; on `p` it pauses reading and
/// resumes from a timer 50 ms later. A line `g` is answered with
/// `value_len` bytes (then a newline).
struct OneLine {
    value_len: usize,
    calls: Arc<AtomicUsize>,
}

impl Handler for OneLine {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        self.calls.fetch_add(1, SeqCst);
        let Some(end) = data.iter().position(|&b| b == b'\n') else { return 0 };
        let line = &data[..=end];
        if line == b"g\n" {
            let value = pattern(0, self.value_len);
            assert!(io.write(conn, &value) && io.write(conn, b"\n"), "a write to an open connection is accepted");
        } else if line == b"w\n" {
            // Half in place, behind a write still queued; half in place alone.
            let value = pattern(0, self.value_len);
            let half = self.value_len / 2;
            assert!(io.write(conn, &value[..half]), "a write to an open connection is accepted");
            let n = io.write_with(conn, |out| {
                assert!(out.is_empty(), "write_with's buffer starts empty");
                out.extend_from_slice(&value[half..]);
                out.len()
            });
            assert_eq!(n, Some(self.value_len - half), "write_with returns what its closure returned");
            assert_eq!(io.write_with(conn, |out| out.push(b'\n')), Some(()));
        } else if line == b"s\n" {
            // A copied head, two shared buffers (one of them short enough
            // to be copied), a copied tail: one stream, in order.
            let value = Bytes::from(pattern(0, self.value_len));
            let accepted = io.write(conn, b"<")
                && io.write_bytes(conn, value.clone())
                && io.write_bytes(conn, Bytes::from_static(b"|"))
                && io.write_bytes(conn, value)
                && io.write(conn, b">\n");
            assert!(accepted, "shared writes to an open connection are accepted");
        } else if line == b"q\n" {
            assert_eq!(io.write_with(conn, |out| out.extend_from_slice(b"bye\n")), Some(()));
            io.close(conn);
            let mut called = false;
            assert_eq!(io.write_with(conn, |_| called = true), None, "no write after close");
            assert!(!called, "the closure is not called for a closing connection");
        } else {
            assert!(io.write(conn, line), "a write to an open connection is accepted");
        }
        if line == b"p\n" {
            io.pause_reading(conn);
            io.set_timer(io.now() + Duration::from_millis(50), conn.as_u64());
        }
        end + 1
    }

    fn on_timer(&mut self, io: &mut Io<()>, _timer: TimerId, token: u64) {
        io.resume_reading(ConnId::from_u64(token));
    }
}

fn one_line_server(config: Config, value_len: usize) -> (Server<OneLine>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    (serve(config, 1, move |_| OneLine { value_len, calls: c.clone() }), calls)
}

/// Three lines in one write to a handler that takes one per call: all
/// three are answered with no more input (each rest is offered again).
fn one_request_per_call(backend: Backend) {
    let (server, calls) = one_line_server(config(backend).build().unwrap(), 0);
    let mut c = connect(server.addr);
    c.write_all(b"a\nb\nc\n").unwrap();
    assert_bytes(&read_exact(&mut c, 6), b"a\nb\nc\n", "three lines answered from one write");
    // And a partial line is handed back until its end arrives.
    c.write_all(b"d\ne").unwrap();
    assert_bytes(&read_exact(&mut c, 2), b"d\n", "the whole line");
    c.write_all(b"\n").unwrap();
    assert_bytes(&read_exact(&mut c, 2), b"e\n", "the line completed");
    drop(c);
    server.stop();
    assert!(calls.load(SeqCst) >= 5, "at least one call per line");
}

/// Forty pipelined requests for a 1 MiB value each, read slowly: the
/// output never holds more than its bound plus one write, and every byte
/// arrives, in order.
fn output_bound_holds_against_a_pipeline(backend: Backend) {
    const VALUE: usize = 1 << 20;
    const MAX_OUTPUT: usize = 256 << 10;
    const REQUESTS: usize = 40;
    let (server, _calls) = one_line_server(config(backend).max_output(MAX_OUTPUT).build().unwrap(), VALUE);
    let mut c = connect(server.addr);
    c.write_all(&b"g\n".repeat(REQUESTS)).unwrap();
    // Let the output pile up against a client that is not reading yet.
    thread::sleep(Duration::from_millis(100));
    let mut want = pattern(0, VALUE);
    want.push(b'\n');
    for i in 0..REQUESTS {
        assert_bytes(&read_exact(&mut c, want.len()), &want, &format!("{backend}: value {i}"));
    }
    drop(c);
    let finished = server.stop();
    let peak = finished.stats.peak_output as usize;
    assert!(
        peak <= MAX_OUTPUT + VALUE + 1,
        "{backend}: {peak} bytes of output queued at once; the bound is {MAX_OUTPUT} plus one write of {VALUE}"
    );
}

/// A handler that pauses reading after `p` gets the input behind it when
/// it resumes, without the client sending more.
fn paused_reading_resumes_with_the_input_left(backend: Backend) {
    let (server, _calls) = one_line_server(config(backend).build().unwrap(), 0);
    let mut c = connect(server.addr);
    let start = Instant::now();
    c.write_all(b"p\nx\ny\n").unwrap();
    assert_bytes(&read_exact(&mut c, 2), b"p\n", "the line that pauses");
    assert_bytes(&read_exact(&mut c, 4), b"x\ny\n", "the lines behind it, after the resume");
    assert!(start.elapsed() >= Duration::from_millis(50), "{backend}: answered before the handler resumed reading");
    drop(c);
    server.stop();
}

/// Takes 1 KiB per call, then pauses reading until a timer 1 ms later
/// resumes it: a handler slower than its peer.
struct Sipper {
    taken: Arc<AtomicUsize>,
    closes: Arc<Mutex<Vec<Reason>>>,
}

impl Handler for Sipper {
    type Conn = ();
    type Message = ConnId;
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let n = data.len().min(1024);
        self.taken.fetch_add(n, SeqCst);
        io.pause_reading(conn);
        io.set_timer(io.now() + Duration::from_millis(1), conn.as_u64());
        n
    }
    fn on_timer(&mut self, io: &mut Io<()>, _timer: TimerId, token: u64) {
        io.resume_reading(ConnId::from_u64(token));
    }
    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.closes.lock().unwrap().push(reason.into());
    }
}

/// A peer sends 32 MiB to a handler that takes 1 KiB a call and pauses
/// after each for 1 ms: for 3 s the connection stays open (no InputLimit
/// for input it did not ask for: only input offered and left unconsumed
/// counts against the 256 KiB `max_input`), and the sender is held back
/// by TCP (on io_uring too: no receive runs while input waits unoffered),
/// not refused.
fn paused_reading_holds_a_fast_sender_back(backend: Backend) {
    let (taken, closes) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let (t2, c2) = (taken.clone(), closes.clone());
    let config = config(backend).max_input(256 << 10).build().unwrap();
    let server = serve(config, 1, move |_| Sipper { taken: t2.clone(), closes: c2.clone() });
    let c = connect(server.addr);
    c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let writer = send_in_background(&c, pattern(0, 32 << 20), 1 << 20, false);
    thread::sleep(Duration::from_secs(3));
    assert_eq!(*closes.lock().unwrap(), [], "{backend}: closed while pausing");
    let took = taken.load(SeqCst);
    assert!(took >= 64 << 10, "{backend}: only {took} bytes taken in 3 s");
    assert!(!writer.is_finished(), "{backend}: the sender was not held back (or failed)");
    // Both directions of every handle: the writer's blocked write fails.
    c.shutdown(Shutdown::Both).unwrap();
    let _ = writer.join();
    server.stop();
}

/// A stop closes a connection with nothing to send and nothing unread at
/// once, with a FIN, instead of lingering for the peer's EOF.
fn stop_closes_idle_connections_at_once(backend: Backend) {
    let config = config(backend).linger(Duration::from_secs(5)).build().unwrap();
    let (server, _calls) = one_line_server(config, 0);
    let mut c = connect(server.addr);
    c.write_all(b"a\n").unwrap();
    assert_bytes(&read_exact(&mut c, 2), b"a\n", "the answer before the stop");
    let start = Instant::now();
    let finished = server.stop();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(2), "{backend}: the stop took {took:?} with one idle client (linger 5 s)");
    let (rest, end) = read_to_end(&mut c);
    assert_eq!((rest.len(), end), (0, End::Eof), "{backend}: a FIN, not a reset");
    assert_eq!(finished.stats.closed, 1, "{backend}");
}

/// Tells each connection its peer's and its own address, as text.
struct Addresses;

impl Handler for Addresses {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        let peer = io.peer_addr(conn).expect("an accepted connection has a peer");
        let local = io.local_addr(conn).expect("and an address of its own");
        assert!(io.write(conn, format!("{peer} {local}\n").as_bytes()));
    }

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }

    fn on_close(&mut self, io: &mut Io<()>, conn: ConnId, _: (), _reason: &CloseReason) {
        assert!(io.peer_addr(conn).is_err() && io.local_addr(conn).is_err(), "a closed id has no addresses");
    }
}

/// The peer and local addresses the loop gives are the client's own and
/// the one it connected to.
fn addresses_of_a_connection(backend: Backend) {
    let server = serve(config(backend).build().unwrap(), 1, |_| Addresses);
    let mut c = connect(server.addr);
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        line.extend(read_exact(&mut c, 1));
    }
    let want = format!("{} {}\n", c.local_addr().unwrap(), c.peer_addr().unwrap());
    assert_eq!(String::from_utf8_lossy(&line), want, "{backend}");
    drop(c);
    server.stop();
}

/// Greets every connection with bytes it shares through an `Rc`.
struct RcGreeter(std::rc::Rc<Vec<u8>>);

impl Handler for RcGreeter {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        assert!(io.write(conn, &self.0));
    }

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }
}

/// A handler with nothing to do that reads, at its start, how many CPUs
/// its thread may run on.
struct CountsCpus(Arc<AtomicUsize>);

impl Handler for CountsCpus {
    type Conn = ();
    type Message = ();

    fn on_start(&mut self, _io: &mut Io<()>) {
        let cpus = rustix::thread::sched_getaffinity(None).map_or(0, |set| set.count() as usize);
        self.0.store(cpus, SeqCst);
    }

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }
}

/// A lone loop runs on the calling thread: a CPU pin its `make_handler`
/// makes holds in the loop and is undone when `run` returns, as it ends
/// with a loop's own thread. (The lab pins its in-process load this way,
/// and a bench whose main thread stayed pinned to one CPU could no longer
/// read the CPUs' placement.)
fn a_pin_made_for_a_lone_loop_ends_with_run(backend: Backend) {
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    let before = sched_getaffinity(None).expect("this thread's CPUs");
    if before.count() < 2 {
        eprintln!("skipped: this thread may run on one CPU only");
        return;
    }
    let first = (0..CpuSet::MAX_CPU).find(|&c| before.is_set(c)).expect("a CPU in a non-empty set");
    let caller = thread::current().id();
    let pin_to_first = move || {
        let mut one = CpuSet::new();
        one.set(first);
        sched_setaffinity(None, &one).expect("pinned to one CPU");
    };
    let given_back = |when: &str| {
        let after = sched_getaffinity(None).expect("this thread's CPUs");
        assert!(after == before, "{backend}: {when} the thread is on {} CPUs, not {}", after.count(), before.count());
    };
    let in_loop = Arc::new(AtomicUsize::new(usize::MAX));
    let started = Instant::now();
    let seen = in_loop.clone();
    let finished = Runtime::new(config(backend).build().unwrap(), 1)
        .unwrap()
        .run(move |_| {
            assert_eq!(thread::current().id(), caller, "{backend}: a lone loop runs on the calling thread");
            pin_to_first();
            CountsCpus(seen.clone())
        })
        .unwrap_or_else(|e| panic!("{backend}: {e}"));
    assert!(started.elapsed() < LIMIT, "{backend}: a loop with nothing to do took {:?}", started.elapsed());
    assert_eq!(finished.handlers.len(), 1);
    assert_eq!(in_loop.load(SeqCst), 1, "{backend}: the pin did not hold in the loop");
    given_back("after run returned");
    // The same when `make_handler` panics after pinning.
    let panicked = Runtime::new(config(backend).build().unwrap(), 1).unwrap().run(move |_| -> CountsCpus {
        pin_to_first();
        panic!("make_handler fails after pinning (this test's own panic)")
    });
    assert!(matches!(panicked, Err(iomux::Error::LoopPanicked)), "{backend}: {:?}", panicked.err());
    given_back("after a panic");
}

/// `Runtime::run_local` serves with a handler that is not `Send`.
fn a_handler_that_is_not_send(backend: Backend) {
    let runtime = iomux::runtime::Runtime::new(config(backend).build().unwrap(), 2)
        .unwrap()
        .bind("127.0.0.1:0".parse().unwrap())
        .unwrap();
    let (addr, control) = (runtime.local_addr().unwrap(), runtime.control());
    let loops =
        thread::spawn(move || runtime.run_local(|i| RcGreeter(std::rc::Rc::new(format!("loop {i}\n").into_bytes()))));
    let mut greetings = Vec::new();
    for _ in 0..4 {
        let mut c = connect(addr);
        greetings.push(String::from_utf8(read_exact(&mut c, 7)).unwrap());
    }
    control.stop();
    let finished = loops.join().unwrap().unwrap();
    assert_eq!(finished.handlers.len(), 2, "{backend}");
    assert!(greetings.iter().all(|g| g == "loop 0\n" || g == "loop 1\n"), "{backend}: {greetings:?}");
    assert_eq!(finished.stats.accepted, 4, "{backend}");
}

/// Lines set, move and clear the connection's deadline: `d<ms>` sets it
/// that far ahead, `c` clears it; each line is echoed. A deadline that
/// comes writes `deadline` and closes (as the default does, with a word
/// first), and is counted.
struct Deadliner {
    fired: Arc<AtomicUsize>,
}

impl Handler for Deadliner {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let Some(end) = data.iter().position(|&b| b == b'\n') else { return 0 };
        let line = &data[..end];
        if let Some(ms) = line.strip_prefix(b"d").and_then(|ms| std::str::from_utf8(ms).ok()?.parse().ok()) {
            let at = io.now() + Duration::from_millis(ms);
            assert!(io.set_deadline(conn, at), "a deadline on an open connection is set");
            assert_eq!(io.deadline(conn), Some(at), "the deadline tells itself");
        } else if line == b"c" {
            assert!(io.clear_deadline(conn), "there was a deadline to clear");
            assert_eq!(io.deadline(conn), None);
        }
        assert!(io.write(conn, &data[..=end]), "a write to an open connection is accepted");
        end + 1
    }

    fn on_deadline(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
        assert_eq!(io.deadline(conn), None, "a deadline is cleared when it comes");
        self.fired.fetch_add(1, SeqCst);
        assert!(io.write(conn, b"deadline\n"), "the connection is open");
        io.close(conn);
    }
}

/// A deadline comes once, not before its time; moved later it waits for
/// the later time (however often it is moved); moved earlier it comes
/// earlier; cleared, or on a closed connection, it never comes.
fn deadlines_fire_move_and_clear(backend: Backend) {
    let fired = Arc::new(AtomicUsize::new(0));
    let f = fired.clone();
    let server = serve(config(backend).build().unwrap(), 1, move |_| Deadliner { fired: f.clone() });
    let expect_deadline = |c: &mut std::net::TcpStream, after: Instant, at_least: Duration, what: &str| {
        let (got, end) = read_to_end(c);
        assert_eq!(got, b"deadline\n", "{backend}: {what}: {end:?}");
        assert!(
            after.elapsed() >= at_least,
            "{backend}: {what}: came after {:?}, set for {at_least:?}",
            after.elapsed()
        );
    };
    // Set once: it comes, then the connection closes.
    let mut once = connect(server.addr);
    let start = Instant::now();
    once.write_all(b"d150\n").unwrap();
    assert_bytes(&read_exact(&mut once, 5), b"d150\n", "echoed");
    expect_deadline(&mut once, start, Duration::from_millis(150), "set once");
    // Moved later on every line for 400 ms: it comes 150 ms after the last.
    let mut busy = connect(server.addr);
    let mut last_sent = Instant::now();
    for _ in 0..8 {
        // The server's clock for this line is read after it arrived.
        last_sent = Instant::now();
        busy.write_all(b"d150\n").unwrap();
        assert_bytes(&read_exact(&mut busy, 5), b"d150\n", "echoed while busy");
        thread::sleep(Duration::from_millis(50));
    }
    expect_deadline(&mut busy, last_sent, Duration::from_millis(150), "moved later");
    // Far ahead, then moved earlier: the earlier time counts.
    let mut earlier = connect(server.addr);
    let start = Instant::now();
    earlier.write_all(b"d60000\nd100\n").unwrap();
    assert_bytes(&read_exact(&mut earlier, 12), b"d60000\nd100\n", "echoed");
    expect_deadline(&mut earlier, start, Duration::from_millis(100), "moved earlier");
    assert!(start.elapsed() < Duration::from_secs(30), "{backend}: the earlier deadline did not replace the later");
    // Cleared: nothing comes; the connection stays open.
    let mut cleared = connect(server.addr);
    cleared.write_all(b"d100\nc\n").unwrap();
    assert_bytes(&read_exact(&mut cleared, 7), b"d100\nc\n", "echoed");
    // And closed by the peer before its deadline: it never comes.
    let mut gone = connect(server.addr);
    gone.write_all(b"d100\n").unwrap();
    assert_bytes(&read_exact(&mut gone, 5), b"d100\n", "echoed");
    drop(gone);
    thread::sleep(Duration::from_millis(300));
    cleared.write_all(b"x\n").unwrap();
    assert_bytes(&read_exact(&mut cleared, 2), b"x\n", "a cleared deadline leaves the connection open");
    assert_eq!(fired.load(SeqCst), 3, "{backend}: deadlines that came (set, moved later, moved earlier)");
    drop(cleared);
    server.stop();
}

/// `write_with` serializes in order behind output still queued (a large
/// write the peer has not read yet) and alone; after close it is refused.
fn writes_in_place_keep_their_order(backend: Backend) {
    const VALUE: usize = 3 << 20;
    let (server, _calls) = one_line_server(config(backend).build().unwrap(), VALUE);
    let mut c = connect(server.addr);
    c.write_all(b"w\nw\nq\n").unwrap();
    let mut want = pattern(0, VALUE);
    want.push(b'\n');
    for i in 0..2 {
        assert_bytes(&read_exact(&mut c, want.len()), &want, &format!("{backend}: value {i}"));
    }
    let (rest, end) = read_to_end(&mut c);
    assert_eq!((rest.as_slice(), end), (&b"bye\n"[..], End::Eof), "{backend}: the last write, then the close");
    server.stop();
}

/// Shared buffers go out with the copied writes around them, in order,
/// gathered into sends of several buffers; behind output still queued
/// too (the second request's arrives while the first's is unread).
fn shared_buffers_go_out_gathered_in_order(backend: Backend) {
    const VALUE: usize = 1 << 20;
    let (server, _calls) = one_line_server(config(backend).build().unwrap(), VALUE);
    let mut c = connect(server.addr);
    c.write_all(b"s\ns\nq\n").unwrap();
    let value = pattern(0, VALUE);
    let want = [&b"<"[..], &value, b"|", &value, b">\n"].concat();
    for i in 0..2 {
        assert_bytes(&read_exact(&mut c, want.len()), &want, &format!("{backend}: reply {i}"));
    }
    let (rest, end) = read_to_end(&mut c);
    assert_eq!((rest.as_slice(), end), (&b"bye\n"[..], End::Eof), "{backend}: the last write, then the close");
    let finished = server.stop();
    assert!(finished.stats.gathered_sends > 0, "{backend}: the shared buffers went out in gathered sends");
    let sendmsg = finished.stats.syscalls.get(iomux::Syscall::Sendmsg);
    match backend {
        Backend::Uring | Backend::UringSqpoll => assert_eq!(sendmsg, 0, "{backend}: sent by the ring"),
        _ => assert!(sendmsg >= finished.stats.gathered_sends, "{backend}: a gathered send is a sendmsg"),
    }
}

/// A relay: each connection is told its loop (`loop <i>`); a line
/// `<n> <text>` sends `<text>` to loop n, which writes it to every
/// connection it holds.
struct Relay {
    me: usize,
    loops: Vec<Sender<Vec<u8>>>,
    conns: Vec<ConnId>,
}

impl Handler for Relay {
    type Conn = ();
    type Message = Vec<u8>;

    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        self.conns.push(conn);
        assert!(io.write(conn, format!("loop {}\n", self.me).as_bytes()), "a new connection takes writes");
    }

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let Some(end) = data.iter().position(|&b| b == b'\n') else { return 0 };
        let line = std::str::from_utf8(&data[..end]).expect("test lines are UTF-8");
        let (to, text) = line.split_once(' ').expect("a line is `<loop> <text>`");
        let to: usize = to.parse().expect("a loop number");
        self.loops[to].send(format!("{text}\n").into_bytes()).expect("the loops run until the test stops them");
        end + 1
    }

    fn on_message(&mut self, io: &mut Io<()>, msg: Vec<u8>) {
        for &conn in &self.conns {
            assert!(io.write(conn, &msg), "every held connection is open");
        }
    }

    fn on_close(&mut self, _io: &mut Io<()>, conn: ConnId, _: (), _reason: &CloseReason) {
        self.conns.retain(|&c| c != conn);
    }
}

/// Messages from a handler reach the other loop, and those from a plain
/// thread arrive all and in the order sent; once the loops end, a send
/// hands its message back.
fn messages_cross_loops_in_order(backend: Backend) {
    let runtime =
        Runtime::new(config(backend).build().unwrap(), 2).unwrap().bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let loops = runtime.senders::<Vec<u8>>().unwrap();
    assert_eq!(loops.iter().map(Sender::loop_index).collect::<Vec<_>>(), [0, 1]);
    let for_handlers = loops.clone();
    let server = start(runtime, move |me| Relay { me, loops: for_handlers.clone(), conns: Vec::new() });
    // One connection on each loop (the kernel spreads them by hash).
    let mut on_loop: [Option<std::net::TcpStream>; 2] = [None, None];
    for _ in 0..64 {
        let mut c = connect(server.addr);
        let greeting = read_exact(&mut c, 7);
        let i = usize::from(greeting[5] - b'0');
        on_loop[i].get_or_insert(c);
        if on_loop.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some(mut zero), Some(mut one)] = on_loop else { panic!("{backend}: 64 connections all went to one loop") };
    zero.write_all(b"1 from loop 0\n").unwrap();
    assert_bytes(&read_exact(&mut one, 12), b"from loop 0\n", "loop 0's message on loop 1");
    one.write_all(b"0 from loop 1\n").unwrap();
    assert_bytes(&read_exact(&mut zero, 12), b"from loop 1\n", "loop 1's message on loop 0");
    let sender = loops[1].clone();
    let sent = thread::spawn(move || {
        for n in 0..1000 {
            sender.send(format!("{n:04}\n").into_bytes()).unwrap();
        }
    });
    let want: Vec<u8> = (0..1000).flat_map(|n| format!("{n:04}\n").into_bytes()).collect();
    assert_bytes(&read_exact(&mut one, want.len()), &want, "a thread's 1000 messages, in order");
    sent.join().unwrap();
    let finished = server.stop();
    assert_eq!(finished.stats.messages, 1002, "{backend}");
    let late = loops[0].send(b"late".to_vec());
    assert!(matches!(late, Err(iomux::Error::LoopEnded { loop_index: 0 })), "{backend}: {late:?}");
}

/// Senders made for one message type cannot feed a handler of another.
#[test]
fn senders_of_another_type_are_refused() {
    let runtime = Runtime::new(Config::default(), 1).unwrap();
    runtime.senders::<u32>().unwrap();
    let err = runtime.senders::<u64>().unwrap_err().to_string();
    assert!(err.contains("u32") && err.contains("u64"), "{err}");
    let err = runtime.run(|me| Relay { me, loops: Vec::new(), conns: Vec::new() }).err().expect("refused").to_string();
    assert!(err.contains("u32") && err.contains("Vec<u8>"), "{err}");
}
