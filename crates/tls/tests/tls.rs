//! iomux-tls on every backend, against rustls's own blocking client:
//! TLS 1.3 and 1.2 echo with ALPN, resumption, close_notify both ways,
//! and bad input (garbage, a truncated handshake) answered by an alert or
//! a close naming the layer.

#[path = "../../iomux/tests/runtime_support/mod.rs"]
#[macro_use]
mod runtime_support;

use iomux::runtime::{CloseReason, Config, ConnId, Handler, Io};
use iomux::Backend;
use iomux_tls::rustls::pki_types::ServerName;
use iomux_tls::rustls::{self, ClientConfig, ClientConnection, HandshakeKind, StreamOwned};
use iomux_tls::{certs, Tls};
use runtime_support::*;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};

on_every_backend! {
    tls13_echo_with_alpn_and_close_notify,
    tls12_echo_and_resumption,
    without_resumption_every_handshake_is_full_with_the_pinned_suite,
    sni_chooses_the_certificate_valid_for_the_name,
    garbage_gets_an_alert_and_a_close,
    a_truncated_handshake_closes_with_the_layers_error,
    a_stalled_handshake_closes_at_the_timeout,
    a_split_hello_then_junk_closes_only_that_connection,
}

/// Echoes; records close reasons and what each connection negotiated.
struct Echo {
    closes: Arc<Mutex<Vec<String>>>,
    negotiated: Arc<Mutex<Vec<iomux_tls::TlsInfo>>>,
}

impl Handler for Echo {
    type Conn = bool; // negotiated recorded
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<bool>, _conn: ConnId) -> bool {
        false
    }

    fn on_data(&mut self, io: &mut Io<bool>, conn: ConnId, told: &mut bool, data: &[u8]) -> usize {
        if !*told {
            *told = true;
            if let Some(info) = iomux_tls::info(io, conn) {
                self.negotiated.lock().unwrap().push(info);
            }
        }
        let _ = io.write(conn, data);
        data.len()
    }

    fn on_close(&mut self, _io: &mut Io<bool>, _conn: ConnId, _: bool, reason: &CloseReason) {
        let said = match reason {
            CloseReason::Layer(e) => format!("layer: {e}"),
            other => format!("{other:?}"),
        };
        self.closes.lock().unwrap().push(said);
    }
}

struct Setup {
    server: Server<Tls<Echo>>,
    closes: Arc<Mutex<Vec<String>>>,
    negotiated: Arc<Mutex<Vec<iomux_tls::TlsInfo>>>,
    roots: rustls::RootCertStore,
}

fn tls_server(backend: Backend) -> Setup {
    tls_server_with(Config::builder().backend(backend).build().unwrap())
}

fn tls_server_with(config: Config) -> Setup {
    let offer = certs::Offer { alpn: vec![b"h2".to_vec(), b"http/1.1".to_vec()], ..certs::Offer::default() };
    tls_server_offering(config, &offer)
}

fn tls_server_offering(config: Config, offer: &certs::Offer) -> Setup {
    let identity = certs::self_signed(&["localhost"]).expect("a certificate");
    let tls = certs::server_config_offering(std::slice::from_ref(&identity), offer).expect("a server config");
    let (closes, negotiated) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let (c, n) = (closes.clone(), negotiated.clone());
    let server = serve(config, 1, move |_| Tls::new(Echo { closes: c.clone(), negotiated: n.clone() }, tls.clone()));
    Setup { server, closes, negotiated, roots: identity.roots().expect("roots") }
}

fn client_config(
    roots: &rustls::RootCertStore,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_protocol_versions(versions)
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

fn tls_connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> StreamOwned<ClientConnection, TcpStream> {
    tls_connect_to(addr, config, "localhost")
}

fn tls_connect_to(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    name: &str,
) -> StreamOwned<ClientConnection, TcpStream> {
    let name = ServerName::try_from(name.to_string()).unwrap();
    let conn = ClientConnection::new(config.clone(), name).expect("a client connection");
    StreamOwned::new(conn, connect(addr))
}

/// Writes `total` bytes in 64 KiB pieces, reading each echo back.
fn echo_through(s: &mut StreamOwned<ClientConnection, TcpStream>, total: usize, what: &str) {
    let want = pattern(0, total);
    for (i, piece) in want.chunks(64 << 10).enumerate() {
        s.write_all(piece).expect("write");
        let mut got = vec![0u8; piece.len()];
        s.read_exact(&mut got).unwrap_or_else(|e| panic!("{what}: reading echo {i}: {e}"));
        assert_bytes(&got, piece, &format!("{what}: echo {i}"));
    }
}

fn close_reasons(closes: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
    wait_until("the connections closed", || closes.lock().unwrap().len() >= n);
    closes.lock().unwrap().clone()
}

/// TLS 1.3 with ALPN: 4 MiB echoed intact; the client's close_notify is
/// answered by the server's, then its FIN; the close is in order.
fn tls13_echo_with_alpn_and_close_notify(backend: Backend) {
    let setup = tls_server(backend);
    let config = client_config(&setup.roots, &[&rustls::version::TLS13]);
    let mut s = tls_connect(setup.server.addr, &config);
    echo_through(&mut s, 4 << 20, &format!("{backend}"));
    assert_eq!(s.conn.alpn_protocol(), Some(&b"http/1.1"[..]), "{backend}: ALPN");
    assert_eq!(s.conn.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3), "{backend}");
    s.conn.send_close_notify();
    s.flush().expect("flush close_notify");
    s.sock.shutdown(Shutdown::Write).expect("FIN");
    let mut rest = Vec::new();
    // rustls's reader returns the end cleanly only after close_notify.
    s.read_to_end(&mut rest).unwrap_or_else(|e| panic!("{backend}: the server's close: {e}"));
    assert!(rest.is_empty(), "{backend}: nothing after the echo");
    assert_eq!(close_reasons(&setup.closes, 1), ["PeerClosed"], "{backend}");
    let info = setup.negotiated.lock().unwrap()[0].clone();
    assert_eq!((info.alpn.as_deref(), info.resumed, info.established), (Some(&b"http/1.1"[..]), false, true));
}

/// TLS 1.2: echo intact; a second connection with the client's session
/// cache resumes; the same with TLS 1.3's tickets.
fn tls12_echo_and_resumption(backend: Backend) {
    let setup = tls_server(backend);
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let config = client_config(&setup.roots, &[version]);
        for round in 0..2 {
            let mut s = tls_connect(setup.server.addr, &config);
            echo_through(&mut s, 256 << 10, &format!("{backend} {version:?} round {round}"));
            let resumed = s.conn.handshake_kind() == Some(HandshakeKind::Resumed);
            assert_eq!(resumed, round == 1, "{backend} {version:?} round {round}: resumed");
            assert_eq!(s.conn.protocol_version(), Some(version.version), "{backend}");
        }
    }
    let negotiated = setup.negotiated.lock().unwrap().clone();
    let resumed: Vec<bool> = negotiated.iter().map(|i| i.resumed).collect();
    assert_eq!(resumed, [false, true, false, true], "{backend}: the server's view");
    let finished = setup.server.stop();
    let counted = finished.handlers[0].handshakes();
    assert_eq!(counted, iomux_tls::Handshakes { full: 2, resumed: 2 }, "{backend}: the server's count");
    assert_eq!(finished.handlers[0].failed, 0, "{backend}");
}

/// A server offering one suite and one group and no resumption: a client
/// offering everything gets them, and its second connection, which would
/// resume, does a full handshake, as the server's count says.
fn without_resumption_every_handshake_is_full_with_the_pinned_suite(backend: Backend) {
    let offer = certs::Offer {
        suites: vec!["tls13_aes_128_gcm_sha256".into()],
        groups: vec!["X25519".into()],
        no_resumption: true,
        ..certs::Offer::default()
    };
    let setup = tls_server_offering(Config::builder().backend(backend).build().unwrap(), &offer);
    let config = client_config(&setup.roots, &[&rustls::version::TLS12, &rustls::version::TLS13]);
    for round in 0..2 {
        let mut s = tls_connect(setup.server.addr, &config);
        echo_through(&mut s, 1 << 10, &format!("{backend} round {round}"));
        assert_eq!(s.conn.handshake_kind(), Some(HandshakeKind::Full), "{backend} round {round}");
        let suite = s.conn.negotiated_cipher_suite().map(|s| s.suite());
        assert_eq!(suite, Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256), "{backend}");
        let group = s.conn.negotiated_key_exchange_group().map(|g| g.name());
        assert_eq!(group, Some(rustls::NamedGroup::X25519), "{backend}");
    }
    let finished = setup.server.stop();
    assert_eq!(finished.handlers[0].handshakes(), iomux_tls::Handshakes { full: 2, resumed: 0 }, "{backend}");
    // Every suite, and a TLS 1.2 client, whose session ID a cache would resume.
    let offer = certs::Offer { no_resumption: true, ..certs::Offer::default() };
    let setup = tls_server_offering(Config::builder().backend(backend).build().unwrap(), &offer);
    let config = client_config(&setup.roots, &[&rustls::version::TLS12]);
    for round in 0..2 {
        let mut s = tls_connect(setup.server.addr, &config);
        echo_through(&mut s, 1 << 10, &format!("{backend} TLS 1.2 round {round}"));
        assert_eq!(s.conn.handshake_kind(), Some(HandshakeKind::Full), "{backend} TLS 1.2 round {round}");
    }
    let finished = setup.server.stop();
    assert_eq!(finished.handlers[0].handshakes(), iomux_tls::Handshakes { full: 2, resumed: 0 }, "{backend}");
}

/// Two certificates, for a.test (and 127.0.0.1) and for b.test: a client
/// trusting both gets the one valid for the name it asks for; a client
/// that sends no name (an IP address) or an unknown one gets the first,
/// which the unknown name's client then refuses.
fn sni_chooses_the_certificate_valid_for_the_name(backend: Backend) {
    let a = certs::self_signed(&["a.test", "127.0.0.1"]).expect("a certificate");
    let b = certs::self_signed(&["b.test"]).expect("a certificate");
    let mut roots = a.roots().unwrap();
    roots.add(b.chain[0].clone()).unwrap();
    let tls = certs::server_config_offering(&[a, b], &certs::Offer::default()).expect("a server config");
    let (closes, negotiated) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let (c, n) = (closes.clone(), negotiated.clone());
    let config = Config::builder().backend(backend).build().unwrap();
    let server = serve(config, 1, move |_| Tls::new(Echo { closes: c.clone(), negotiated: n.clone() }, tls.clone()));
    let client = client_config(&roots, &[&rustls::version::TLS13]);
    for name in ["b.test", "a.test", "127.0.0.1"] {
        let mut s = tls_connect_to(server.addr, &client, name);
        echo_through(&mut s, 1 << 10, &format!("{backend} {name}"));
    }
    let mut s = tls_connect_to(server.addr, &client, "c.test");
    let refused = s.write_all(b"x").and_then(|()| s.flush()).and_then(|()| s.read(&mut [0u8; 1]));
    let said = format!("{:?}", refused.expect_err("c.test's client refuses the first certificate"));
    assert!(said.contains("NotValidForName"), "{backend}: {said}");
}

/// Plain HTTP to the TLS port: an alert record, then EOF; the close
/// names the layer.
fn garbage_gets_an_alert_and_a_close(backend: Backend) {
    let setup = tls_server(backend);
    let mut c = connect(setup.server.addr);
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let (got, end) = read_to_end(&mut c);
    assert_eq!(end, End::Eof, "{backend}");
    assert_eq!(got.first(), Some(&0x15), "{backend}: an alert record first, got {got:?}");
    drop(c);
    let closes = close_reasons(&setup.closes, 1);
    assert!(closes[0].starts_with("layer: tls: "), "{backend}: {closes:?}");
    let finished = setup.server.stop();
    assert_eq!(finished.handlers[0].failed, 1, "{backend}: counted as failed");
    assert_eq!(finished.handlers[0].handshakes(), iomux_tls::Handshakes::default(), "{backend}");
}

/// Half a ClientHello, then FIN: closed with the layer's error.
fn a_truncated_handshake_closes_with_the_layers_error(backend: Backend) {
    let setup = tls_server(backend);
    // The start of a real ClientHello: a record header and 40 bytes.
    let name = ServerName::try_from("localhost").unwrap();
    let mut client = ClientConnection::new(client_config(&setup.roots, &[&rustls::version::TLS13]), name).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    let mut c = connect(setup.server.addr);
    c.write_all(&hello[..45]).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let (got, _) = read_to_end(&mut c);
    assert!(got.is_empty() || got[0] == 0x15, "{backend}: nothing, or an alert: {got:?}");
    let closes = close_reasons(&setup.closes, 1);
    assert_eq!(closes, ["layer: tls: the peer ended its input during the handshake"], "{backend}");
}

/// A client that connects and sends nothing is closed at the handshake
/// timeout, with that reason, and not before.
fn a_stalled_handshake_closes_at_the_timeout(backend: Backend) {
    let timeout = std::time::Duration::from_millis(300);
    let setup = tls_server_with(Config::builder().backend(backend).handshake_timeout(timeout).build().unwrap());
    let started = std::time::Instant::now();
    let mut c = connect(setup.server.addr);
    let (got, end) = read_to_end(&mut c);
    assert!(started.elapsed() >= timeout, "{backend}: closed after {:?}", started.elapsed());
    assert_eq!((got.len(), end), (0, End::Eof), "{backend}");
    assert_eq!(close_reasons(&setup.closes, 1), ["HandshakeTimeout"], "{backend}");
}

/// The first part of a ClientHello in a record of its own (so rustls is
/// joining a handshake message), then plain HTTP or a bare
/// change_cipher_spec: that connection closes with the layer's error, and
/// the server serves the next one.
fn a_split_hello_then_junk_closes_only_that_connection(backend: Backend) {
    let setup = tls_server(backend);
    let config = client_config(&setup.roots, &[&rustls::version::TLS13]);
    let mut client = ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    let mut first = vec![0x16, 0x03, 0x01, 0x00, 20];
    first.extend_from_slice(&hello[5..25]);
    let junks: [&[u8]; 2] = [b"GET / HTTP/1.1\r\n\r\n", &[0x14, 0x03, 0x03, 0x00, 0x01, 0x01]];
    for (i, junk) in junks.iter().enumerate() {
        let mut c = connect(setup.server.addr);
        c.write_all(&first).unwrap();
        c.write_all(junk).unwrap();
        let (got, _) = read_to_end(&mut c);
        assert!(got.is_empty() || got[0] == 0x15, "{backend} junk {i}: nothing, or an alert: {got:?}");
        let closes = close_reasons(&setup.closes, i + 1);
        assert!(closes[i].starts_with("layer: tls: "), "{backend} junk {i}: {closes:?}");
    }
    let mut s = tls_connect(setup.server.addr, &config);
    echo_through(&mut s, 64 << 10, &format!("{backend}: after the junk"));
}
