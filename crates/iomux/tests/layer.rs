//! A connection's [`Layer`], asserted on every backend with a toy one
//! whose frames a test reads by hand: a handshake (HELLO, READY), data
//! frames with their bytes scrambled, a closing frame and an alert. Bytes
//! pass through it intact both ways, however the wire splits them; writes
//! made before the handshake wait for it; the output's bound, half-close,
//! a close during the handshake, the handshake timeout and bad input all
//! keep the runtime's semantics; an outbound connection hears
//! `on_connect` only once its handshake is done.

#[macro_use]
mod runtime_support;

use iomux::runtime::{CloseReason, Config, ConnId, Handler, Io, Layer, LayerEvents};
use iomux::{Backend, Error};
use runtime_support::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

on_every_backend! {
    echo_passes_through_the_layer_intact,
    writes_before_the_handshake_wait_for_it,
    a_stalled_handshake_times_out,
    bad_input_gets_an_alert_then_a_close,
    a_fin_during_the_handshake_is_the_layers_error,
    the_output_bound_holds_through_the_layer,
    an_outbound_connection_connects_after_its_handshake,
    cleartext_pipelined_after_the_switch_is_refused,
    a_client_layer_set_on_an_established_connection_starts_at_once,
    a_fin_inside_a_frame_is_the_layers_error,
    a_stop_ends_layered_connections_with_their_closing_record,
    cleartext_left_when_switching_from_on_drained_is_refused,
    a_stop_lets_a_handshake_deliver_what_was_written_before_it,
}

// ------------------------------------------------------------ the toy layer

const HELLO: u8 = 1;
const READY: u8 = 2;
const DATA: u8 = 3;
const CLOSE: u8 = 4;
const ALERT: u8 = 5;
/// The longest frame payload: a write is sealed in several frames.
const MAX_FRAME: usize = 4096;
/// What a data frame's bytes are XORed with, so plaintext never passes.
const SCRAMBLE: u8 = 0x5a;

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![kind];
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend(payload.iter().map(|b| if kind == DATA { b ^ SCRAMBLE } else { *b }));
    f
}

/// Plaintext as the toy layer seals it.
fn sealed(plain: &[u8]) -> Vec<u8> {
    plain.chunks(MAX_FRAME).flat_map(|c| frame(DATA, c)).collect()
}

fn refused(reason: &str) -> Error {
    Error::Layer { layer: "toy", reason: reason.into() }
}

struct Toy {
    client: bool,
    established: bool,
    /// An incomplete frame.
    partial: Vec<u8>,
    /// Plaintext written before the handshake.
    held: Vec<u8>,
    close_after_handshake: bool,
}

impl Toy {
    fn new(client: bool) -> Box<Toy> {
        Box::new(Toy {
            client,
            established: false,
            partial: Vec::new(),
            held: Vec::new(),
            close_after_handshake: false,
        })
    }

    fn alert(out: &mut Vec<u8>, reason: &str) -> Error {
        out.extend(frame(ALERT, reason.as_bytes()));
        refused(reason)
    }
}

impl Layer for Toy {
    fn name(&self) -> &'static str {
        "toy"
    }

    fn input(&mut self, wire: &[u8], plain: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<LayerEvents, Error> {
        self.partial.extend_from_slice(wire);
        let mut events = LayerEvents::default();
        let mut at = 0;
        while self.partial.len() - at >= 3 {
            let (kind, len) =
                (self.partial[at], u16::from_be_bytes([self.partial[at + 1], self.partial[at + 2]]) as usize);
            if len > MAX_FRAME {
                return Err(Toy::alert(out, "frame too long"));
            }
            if self.partial.len() - at < 3 + len {
                break;
            }
            let payload = &self.partial[at + 3..at + 3 + len];
            match kind {
                HELLO | READY if !self.established && (kind == HELLO) != self.client => {
                    if kind == HELLO {
                        out.extend(frame(READY, b""));
                    }
                    self.established = true;
                    events.established = true;
                    let held = std::mem::take(&mut self.held);
                    out.extend(sealed(&held));
                    if self.close_after_handshake {
                        out.extend(frame(CLOSE, b""));
                    }
                }
                DATA if self.established && !events.peer_closed => plain.extend(payload.iter().map(|b| b ^ SCRAMBLE)),
                CLOSE if self.established => events.peer_closed = true,
                _ => return Err(Toy::alert(out, "unexpected frame")),
            }
            at += 3 + len;
        }
        self.partial.drain(..at);
        Ok(events)
    }

    fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if self.established {
            out.extend(sealed(plain));
        } else {
            self.held.extend_from_slice(plain);
        }
        Ok(())
    }

    fn established(&self) -> bool {
        self.established
    }

    fn start(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        if self.client {
            out.extend(frame(HELLO, b"")); // a server waits for the peer's
        }
        Ok(())
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.established {
            out.extend(frame(CLOSE, b""));
        } else {
            self.close_after_handshake = true;
        }
    }

    fn peer_fin(&mut self) -> Result<(), Error> {
        if !self.established {
            Err(refused("the peer ended its input during the handshake"))
        } else if !self.partial.is_empty() {
            Err(refused("the peer ended its input inside a frame"))
        } else {
            Ok(())
        }
    }

    fn held(&self) -> usize {
        self.held.len()
    }

    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

// ------------------------------------------------------------ the test peer

/// One frame read from a std stream: its kind and its plain payload.
fn read_frame(s: &mut impl Read) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 3];
    match s.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return None,
        Err(e) => panic!("reading a frame: {e}"),
    }
    let mut payload = vec![0u8; u16::from_be_bytes([head[1], head[2]]) as usize];
    s.read_exact(&mut payload).expect("a frame's payload");
    if head[0] == DATA {
        payload.iter_mut().for_each(|b| *b ^= SCRAMBLE);
    }
    Some((head[0], payload))
}

/// Reads frames to EOF: the data's plaintext, and the other frames' kinds in order.
fn read_frames_to_end(s: &mut impl Read) -> (Vec<u8>, Vec<u8>) {
    let (mut data, mut kinds) = (Vec::new(), Vec::new());
    while let Some((kind, payload)) = read_frame(s) {
        if kind == DATA {
            data.extend(payload);
        } else {
            kinds.push(kind);
        }
    }
    (data, kinds)
}

/// Connects and completes the toy handshake.
fn handshake(addr: std::net::SocketAddr) -> TcpStream {
    let mut c = connect(addr);
    c.write_all(&frame(HELLO, b"")).unwrap();
    assert_eq!(read_frame(&mut c).map(|f| f.0), Some(READY), "READY answers HELLO");
    c
}

// ------------------------------------------------------------ the handlers

/// Echoes through a toy layer; records close reasons; optionally writes
/// a greeting and closes in on_accept.
struct ToyEcho {
    closes: Arc<Mutex<Vec<Reason>>>,
    greet_and_close: bool,
}

impl Handler for ToyEcho {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        assert!(io.set_layer(conn, Toy::new(false)), "a fresh connection takes a layer");
        if self.greet_and_close {
            assert!(io.write(conn, b"hello before the handshake"));
            assert_eq!(io.buffered(conn), 26, "held plaintext counts as buffered");
            io.close(conn);
        }
    }

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let _ = io.write(conn, data);
        data.len()
    }

    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.closes.lock().unwrap().push(reason_of(reason));
    }
}

/// A close reason as a value, the layer's own ones included.
fn reason_of(reason: &CloseReason) -> Reason {
    match reason {
        CloseReason::HandshakeTimeout => Reason::Other("handshake timeout".into()),
        CloseReason::Layer(e) => Reason::Other(e.to_string()),
        other => other.into(),
    }
}

fn toy_server(config: Config, greet_and_close: bool) -> (Server<ToyEcho>, Arc<Mutex<Vec<Reason>>>) {
    let closes = Arc::new(Mutex::new(Vec::new()));
    let shared = closes.clone();
    let server = serve(config, 1, move |_| ToyEcho { closes: shared.clone(), greet_and_close });
    (server, closes)
}

fn one_close(closes: &Mutex<Vec<Reason>>) -> Reason {
    wait_until("the connection closed", || !closes.lock().unwrap().is_empty());
    closes.lock().unwrap()[0].clone()
}

// ------------------------------------------------------------ the tests

/// 256 KiB sealed in frames and written in 7-byte pieces (so frames split
/// anywhere) comes back intact; the client's closing frame and FIN get
/// the server's closing frame, then its FIN: both directions in order.
fn echo_passes_through_the_layer_intact(backend: Backend) {
    let (server, closes) = toy_server(Config::builder().backend(backend).build().unwrap(), false);
    let mut c = handshake(server.addr);
    let want = pattern(0, 256 << 10);
    let mut wire = sealed(&want);
    wire.extend(frame(CLOSE, b""));
    let writer = send_in_background(&c, wire, 7, true);
    let (data, kinds) = read_frames_to_end(&mut c);
    assert_eq!(writer.join().unwrap(), None, "{backend}: the client's writes");
    assert_bytes(&data, &want, &format!("{backend}: echoed through the layer"));
    assert_eq!(kinds, vec![CLOSE], "{backend}: the server's closing frame, then EOF");
    assert_eq!(one_close(&closes), Reason::PeerClosed, "{backend}");
}

/// A greeting written and a close made in on_accept wait for the
/// handshake: nothing comes before HELLO; after it, READY, the greeting
/// sealed, the closing frame, then EOF.
fn writes_before_the_handshake_wait_for_it(backend: Backend) {
    let (server, closes) = toy_server(Config::builder().backend(backend).build().unwrap(), true);
    let mut c = connect(server.addr);
    c.set_read_timeout(Some(Duration::from_millis(150))).unwrap();
    let mut early = [0u8; 16];
    match c.read(&mut early) {
        Err(e) if is_timeout(&e) => {}
        other => panic!("{backend}: before the handshake the server must send nothing, got {other:?}"),
    }
    set_timeouts(&c);
    c.write_all(&frame(HELLO, b"")).unwrap();
    assert_eq!(read_frame(&mut c).map(|f| f.0), Some(READY), "{backend}");
    let (data, kinds) = read_frames_to_end(&mut c);
    assert_eq!(data, b"hello before the handshake", "{backend}");
    assert_eq!(kinds, vec![CLOSE], "{backend}");
    drop(c); // its FIN ends the server's linger
    assert_eq!(one_close(&closes), Reason::Local, "{backend}");
}

/// A client that connects and says nothing is closed at the handshake
/// timeout, with its own reason, not before.
fn a_stalled_handshake_times_out(backend: Backend) {
    let timeout = Duration::from_millis(300);
    let config = Config::builder().backend(backend).handshake_timeout(timeout).build().unwrap();
    let (server, closes) = toy_server(config, false);
    let started = Instant::now();
    let mut c = connect(server.addr);
    let (got, end) = read_to_end(&mut c);
    assert!(started.elapsed() >= timeout, "{backend}: closed after {:?}, before the timeout", started.elapsed());
    assert_eq!((got.len(), end), (0, End::Eof), "{backend}: nothing, then EOF");
    assert_eq!(one_close(&closes), Reason::Other("handshake timeout".into()), "{backend}");
}

/// A frame the layer does not accept gets an alert, then EOF; the close
/// names the layer and what it refused.
fn bad_input_gets_an_alert_then_a_close(backend: Backend) {
    let (server, closes) = toy_server(Config::builder().backend(backend).build().unwrap(), false);
    let mut c = handshake(server.addr);
    c.write_all(&frame(9, b"junk")).unwrap();
    let (data, kinds) = read_frames_to_end(&mut c);
    assert_eq!((data.len(), kinds), (0, vec![ALERT]), "{backend}: an alert, then EOF");
    drop(c);
    assert_eq!(one_close(&closes), Reason::Other("toy: unexpected frame".into()), "{backend}");
}

/// A FIN in the middle of the handshake is the layer's to judge: here an
/// error, and the connection closes with it.
fn a_fin_during_the_handshake_is_the_layers_error(backend: Backend) {
    let (server, closes) = toy_server(Config::builder().backend(backend).build().unwrap(), false);
    let mut c = connect(server.addr);
    c.write_all(&frame(HELLO, b"")[..2]).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let (got, _) = read_to_end(&mut c);
    assert!(got.is_empty(), "{backend}: no answer to half a HELLO");
    assert_eq!(
        one_close(&closes),
        Reason::Other("toy: the peer ended its input during the handshake".into()),
        "{backend}"
    );
}

/// Against a client that sends 8 MiB before it reads, the sealed output
/// stays within its bound plus one read's worth; all of it comes back.
fn the_output_bound_holds_through_the_layer(backend: Backend) {
    const MAX_OUTPUT: usize = 256 << 10;
    const TOTAL: usize = 8 << 20;
    let config = Config::builder().backend(backend).max_output(MAX_OUTPUT).build().unwrap();
    let (server, _closes) = toy_server(config, false);
    let mut c = handshake(server.addr);
    let want = pattern(0, TOTAL);
    let mut wire = sealed(&want);
    wire.extend(frame(CLOSE, b""));
    let writer = send_in_background(&c, wire, 64 << 10, true);
    thread::sleep(Duration::from_millis(200)); // the output piles up
    let (data, kinds) = read_frames_to_end(&mut c);
    assert_eq!(writer.join().unwrap(), None, "{backend}");
    assert_bytes(&data, &want, &format!("{backend}: echoed through the layer"));
    assert_eq!(kinds, vec![CLOSE], "{backend}");
    let finished = server.stop();
    let peak = finished.stats.peak_output as usize;
    // One offer is at most read_buffer (64 KiB by default) of plaintext,
    // on every backend, however much one receive decrypted.
    let bound = MAX_OUTPUT + sealed(&[0; 64 << 10]).len();
    assert!(peak <= bound, "{backend}: {peak} bytes queued at once; the bound is {bound}");
}

/// An outbound layered connection: the opening flight goes first, writes
/// made at once wait for the handshake, on_connect comes only after it,
/// and the peer's closing frame ends the input in order.
fn an_outbound_connection_connects_after_its_handshake(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let connected = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (seen, events) = (connected.clone(), log.clone());
    let client = thread::spawn(move || {
        run_client(Config::builder().backend(backend).build().unwrap(), move |_| Dialer {
            addr,
            connected: seen.clone(),
            log: events.clone(),
            starttls: false,
        })
    });
    let mut peer = accept_within(&listener);
    assert_eq!(read_frame(&mut peer).map(|f| f.0), Some(HELLO), "{backend}: the opening flight first");
    thread::sleep(Duration::from_millis(50));
    assert_eq!(connected.load(SeqCst), 0, "{backend}: on_connect before the handshake");
    peer.write_all(&frame(READY, b"")).unwrap();
    assert_eq!(read_frame(&mut peer), Some((DATA, b"ping".to_vec())), "{backend}: the early write, sealed");
    wait_count("on_connect", &connected, 1);
    let mut reply = frame(DATA, b"pong");
    reply.extend(frame(CLOSE, b""));
    peer.write_all(&reply).unwrap();
    peer.shutdown(Shutdown::Write).unwrap();
    let (data, kinds) = read_frames_to_end(&mut peer);
    assert_eq!((data.len(), kinds), (0, vec![CLOSE]), "{backend}: our closing frame, then FIN");
    client.join().unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["connect", "data pong", "read closed", "close PeerClosed"], "{backend}");
}

struct Dialer {
    addr: std::net::SocketAddr,
    connected: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
    /// STARTTLS: connect in the clear, switch from on_connect.
    starttls: bool,
}

impl Handler for Dialer {
    type Conn = ();
    type Message = ();

    fn on_start(&mut self, io: &mut Io<()>) {
        let conn = io.connect(self.addr, None, ());
        if !self.starttls {
            assert!(io.set_layer(conn, Toy::new(true)));
            assert!(io.write(conn, b"ping"), "a write while connecting is held");
        }
    }

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_connect(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
        self.connected.fetch_add(1, SeqCst);
        self.log.lock().unwrap().push("connect".into());
        if self.starttls {
            assert!(io.write(conn, b"STARTTLS\n"), "in the clear");
            assert!(io.set_layer(conn, Toy::new(true)));
            assert!(io.write(conn, b"ping"), "held for the handshake");
        }
    }

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        self.log.lock().unwrap().push(format!("data {}", String::from_utf8_lossy(data)));
        data.len()
    }

    fn on_read_closed(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
        self.log.lock().unwrap().push("read closed".into());
        io.shutdown_write(conn);
    }

    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.log.lock().unwrap().push(format!("close {:?}", reason_of(reason)));
    }
}

/// A plaintext protocol that switches to the layer on "STARTTLS\n": bytes
/// the client sent after the command, before the go-ahead, are an
/// injection and close the connection; a client that waits for the
/// go-ahead goes on through the layer.
fn cleartext_pipelined_after_the_switch_is_refused(backend: Backend) {
    let closes = Arc::new(Mutex::new(Vec::new()));
    let shared = closes.clone();
    let server = serve(Config::builder().backend(backend).build().unwrap(), 1, move |_| StartTls {
        closes: shared.clone(),
        when_drained: false,
    });
    // Well-behaved: waits for the go-ahead, then speaks through the layer.
    let mut c = connect(server.addr);
    c.write_all(b"STARTTLS\n").unwrap();
    assert_eq!(read_exact(&mut c, 3), b"GO\n", "{backend}: the go-ahead, in the clear");
    c.write_all(&frame(HELLO, b"")).unwrap();
    assert_eq!(read_frame(&mut c).map(|f| f.0), Some(READY), "{backend}");
    c.write_all(&sealed(b"through")).unwrap();
    assert_eq!(read_frame(&mut c), Some((DATA, b"through".to_vec())), "{backend}");
    drop(c);
    // Pipelined: the HELLO rides with the command.
    let mut c = connect(server.addr);
    let mut both = b"STARTTLS\n".to_vec();
    both.extend(frame(HELLO, b""));
    c.write_all(&both).unwrap();
    let (got, _) = read_to_end(&mut c);
    assert!(got.starts_with(b"GO\n") || got.is_empty(), "{backend}: got {got:?}");
    wait_until("both closed", || closes.lock().unwrap().len() == 2);
    let reasons = closes.lock().unwrap().clone();
    assert!(
        reasons.contains(&Reason::Other("toy: bytes followed the switch to the layer in the clear".into())),
        "{backend}: {reasons:?}"
    );
}

struct StartTls {
    closes: Arc<Mutex<Vec<Reason>>>,
    /// Switch once the go-ahead is out (on_drained), not at once.
    when_drained: bool,
}

impl Handler for StartTls {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        if io.layer::<Toy>(conn).is_some() {
            let _ = io.write(conn, data); // through the layer
            return data.len();
        }
        if !data.starts_with(b"STARTTLS\n") {
            return 0;
        }
        let _ = io.write(conn, b"GO\n");
        if self.when_drained {
            io.notify_drained(conn);
        } else {
            assert!(io.set_layer(conn, Toy::new(false)));
        }
        9
    }

    fn on_drained(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut ()) {
        assert!(io.set_layer(conn, Toy::new(false)), "from its own callback");
    }

    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.closes.lock().unwrap().push(reason_of(reason));
    }
}

/// A client that switches an established connection (STARTTLS): its
/// command goes in the clear, the opening flight right after it, and
/// what it wrote after the switch waits for the handshake.
fn a_client_layer_set_on_an_established_connection_starts_at_once(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let events = log.clone();
    let client = thread::spawn(move || {
        run_client(Config::builder().backend(backend).build().unwrap(), move |_| Dialer {
            addr,
            connected: Arc::new(AtomicUsize::new(0)),
            log: events.clone(),
            starttls: true,
        })
    });
    let mut peer = accept_within(&listener);
    assert_eq!(read_exact(&mut peer, 9), b"STARTTLS\n", "{backend}: the command in the clear");
    assert_eq!(read_frame(&mut peer).map(|f| f.0), Some(HELLO), "{backend}: the opening flight at once");
    let mut reply = frame(READY, b"");
    reply.extend(frame(DATA, b"pong"));
    reply.extend(frame(CLOSE, b""));
    peer.write_all(&reply).unwrap();
    assert_eq!(read_frame(&mut peer), Some((DATA, b"ping".to_vec())), "{backend}: the held write, sealed");
    peer.shutdown(Shutdown::Write).unwrap();
    let (data, kinds) = read_frames_to_end(&mut peer);
    assert_eq!((data.len(), kinds), (0, vec![CLOSE]), "{backend}");
    client.join().unwrap();
    assert_eq!(log.lock().unwrap().clone(), ["connect", "data pong", "read closed", "close PeerClosed"], "{backend}");
}

/// A FIN that cuts a frame short after the handshake is the layer's to
/// judge too: here a truncation, and the close says so.
fn a_fin_inside_a_frame_is_the_layers_error(backend: Backend) {
    let (server, closes) = toy_server(Config::builder().backend(backend).build().unwrap(), false);
    let mut c = handshake(server.addr);
    c.write_all(&sealed(b"cut short")[..6]).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let (got, _) = read_to_end(&mut c);
    assert!(got.is_empty(), "{backend}: nothing answers a partial frame");
    assert_eq!(one_close(&closes), Reason::Other("toy: the peer ended its input inside a frame".into()), "{backend}");
}

/// A stop: an idle established connection gets the closing frame, then
/// FIN; one still handshaking with nothing written is closed at once.
fn a_stop_ends_layered_connections_with_their_closing_record(backend: Backend) {
    let (server, closes) = toy_server(Config::builder().backend(backend).build().unwrap(), false);
    // Accepted in order: once the second is served, the first is in.
    let mut handshaking = connect(server.addr);
    let mut established = handshake(server.addr);
    assert!(server_has(&established), "{backend}: the established one echoes");
    server.control.stop();
    let (data, kinds) = read_frames_to_end(&mut established);
    assert_eq!((data.len(), kinds), (0, vec![CLOSE]), "{backend}: the closing frame, then FIN");
    let (got, end) = read_to_end(&mut handshaking);
    assert_eq!((got.len(), end), (0, End::Eof), "{backend}: nothing to say before the handshake");
    drop(established);
    let finished = server.finish();
    assert_eq!(finished.stats.accepted, 2, "{backend}");
    let mut reasons = closes.lock().unwrap().clone();
    reasons.sort();
    assert_eq!(reasons, [Reason::Shutdown, Reason::Shutdown], "{backend}");
}

/// Whether the established client's echo comes back.
fn server_has(c: &TcpStream) -> bool {
    let mut c = c.try_clone().expect("clone");
    c.write_all(&sealed(b"?")).expect("write");
    read_frame(&mut c) == Some((DATA, b"?".to_vec()))
}

/// The switch made from on_drained, with the client's HELLO pipelined
/// after its command: the bytes left in the clear close the connection.
fn cleartext_left_when_switching_from_on_drained_is_refused(backend: Backend) {
    let closes = Arc::new(Mutex::new(Vec::new()));
    let shared = closes.clone();
    let config = Config::builder().backend(backend).build().unwrap();
    let server = serve(config, 1, move |_| StartTls { closes: shared.clone(), when_drained: true });
    let mut c = connect(server.addr);
    let mut both = b"STARTTLS\n".to_vec();
    both.extend(frame(HELLO, b""));
    c.write_all(&both).unwrap();
    let _ = read_to_end(&mut c);
    assert_eq!(
        one_close(&closes),
        Reason::Other("toy: bytes followed the switch to the layer in the clear".into()),
        "{backend}"
    );
}

/// A greeting written before the handshake, then a stop: the handshake
/// still completes (within the drain time) and delivers it, sealed, then
/// the closing frame.
fn a_stop_lets_a_handshake_deliver_what_was_written_before_it(backend: Backend) {
    let closes = Arc::new(Mutex::new(Vec::new()));
    let shared = closes.clone();
    let config = Config::builder().backend(backend).build().unwrap();
    let server = serve(config, 1, move |_| Greeter { closes: shared.clone() });
    let mut c = connect(server.addr);
    // Accepted (its greeting held) before the stop: nothing comes yet.
    c.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut nothing = [0u8; 1];
    assert!(matches!(c.read(&mut nothing), Err(ref e) if is_timeout(e)), "{backend}: nothing before HELLO");
    set_timeouts(&c);
    server.control.stop();
    c.write_all(&frame(HELLO, b"")).unwrap();
    assert_eq!(read_frame(&mut c).map(|f| f.0), Some(READY), "{backend}");
    let (data, kinds) = read_frames_to_end(&mut c);
    assert_eq!((data, kinds), (b"welcome".to_vec(), vec![CLOSE]), "{backend}");
    drop(c);
    server.finish();
    assert_eq!(closes.lock().unwrap().clone(), [Reason::Shutdown], "{backend}");
}

/// Greets each connection in on_accept, before its handshake.
struct Greeter {
    closes: Arc<Mutex<Vec<Reason>>>,
}

impl Handler for Greeter {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        assert!(io.set_layer(conn, Toy::new(false)));
        assert!(io.write(conn, b"welcome"));
    }

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }

    fn on_close(&mut self, _io: &mut Io<()>, _conn: ConnId, _: (), reason: &CloseReason) {
        self.closes.lock().unwrap().push(reason_of(reason));
    }
}
