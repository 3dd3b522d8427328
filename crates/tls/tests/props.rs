//! The TLS layer alone, without sockets, against rustls's own client:
//! a handshake and data both ways come out the same however each flight
//! is split, and corrupted or cut flights end in an error (with an alert
//! when TLS has one) and never a panic. `IOMUX_TLS_CASES` sets the cases
//! (256 by default).

use iomux::runtime::Layer;
use iomux_tls::rustls::pki_types::ServerName;
use iomux_tls::rustls::{self, ClientConfig, ClientConnection, ServerConfig};
use iomux_tls::{certs, server_layer};
use proptest::prelude::*;
use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

fn cases() -> u32 {
    std::env::var("IOMUX_TLS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

/// One certificate and the configs for every case (making them is slow):
/// the server's, and clients for TLS 1.3 and for TLS 1.2.
struct Configs {
    server: Arc<ServerConfig>,
    tls13: Arc<ClientConfig>,
    tls12: Arc<ClientConfig>,
}

fn configs() -> &'static Configs {
    static CONFIGS: OnceLock<Configs> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let identity = certs::self_signed(&["localhost"]).expect("a certificate");
        let server = certs::server_config(&identity, &[b"http/1.1"]).expect("a server config");
        let client = |versions: &[&'static rustls::SupportedProtocolVersion]| {
            let config = ClientConfig::builder_with_protocol_versions(versions)
                .with_root_certificates(identity.roots().expect("roots"))
                .with_no_client_auth();
            Arc::new(config)
        };
        Configs { server, tls13: client(&[&rustls::version::TLS13]), tls12: client(&[&rustls::version::TLS12]) }
    })
}

/// The type of the last whole TLS record in `wire`, None if it has none.
fn last_record_type(mut wire: &[u8]) -> Option<u8> {
    let mut last = None;
    while wire.len() >= 5 {
        let len = usize::from(u16::from_be_bytes([wire[3], wire[4]]));
        last = Some(wire[0]);
        wire = &wire[(5 + len).min(wire.len())..];
    }
    last
}

/// Splits `bytes` at the given cut points (taken modulo its length).
fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.extend([0, bytes.len()]);
    at.sort_unstable();
    at.dedup();
    at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
}

/// What the client has to send now.
fn flight(client: &mut ClientConnection) -> Vec<u8> {
    let mut wire = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut wire).expect("the client's records");
    }
    wire
}

/// Hands the server's bytes to the client, all of them.
fn to_client(client: &mut ClientConnection, mut wire: &[u8]) -> Vec<u8> {
    let mut plain = Vec::new();
    while !wire.is_empty() {
        client.read_tls(&mut wire).expect("read_tls");
        client.process_new_packets().expect("the server's records are valid");
        let _ = client.reader().read_to_end(&mut plain);
    }
    plain
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// However the client's flights are split, the handshake completes
    /// and bytes pass intact both ways.
    #[test]
    fn any_split_gives_the_same_conversation(cuts in prop::collection::vec(any::<usize>(), 0..12), tls12 in any::<bool>()) {
        let configs = configs();
        let client_config = if tls12 { &configs.tls12 } else { &configs.tls13 };
        let mut client = ClientConnection::new(client_config.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
        let mut layer = server_layer(&configs.server).unwrap();
        let (mut plain, mut out) = (Vec::new(), Vec::new());
        for _ in 0..4 {
            let wire = flight(&mut client);
            for piece in pieces(&wire, &cuts) {
                layer.input(piece, &mut plain, &mut out).expect("a valid flight, split");
            }
            to_client(&mut client, &std::mem::take(&mut out));
            if !client.is_handshaking() && layer.established() {
                break;
            }
        }
        prop_assert!(layer.established() && !client.is_handshaking());
        client.writer().write_all(b"to the server").unwrap();
        let wire = flight(&mut client);
        for piece in pieces(&wire, &cuts) {
            layer.input(piece, &mut plain, &mut out).unwrap();
        }
        prop_assert_eq!(&plain[..], b"to the server");
        layer.seal(b"to the client", &mut out).unwrap();
        prop_assert_eq!(to_client(&mut client, &out), b"to the client".to_vec());
    }

    /// A ClientHello with bytes changed, cut, or with junk after it: the
    /// layer never panics; when it refuses the input, what that call added
    /// is nothing or ends with an alert record.
    #[test]
    fn corrupted_flights_never_panic(
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
        junk in prop::collection::vec(any::<u8>(), 0..64),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let configs = configs();
        let mut client = ClientConnection::new(configs.tls13.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
        let mut wire = flight(&mut client);
        for (at, xor) in flips {
            let n = wire.len();
            wire[at % n] ^= xor;
        }
        wire.truncate(cut % (wire.len() + 1));
        wire.extend(junk);
        let mut layer = server_layer(&configs.server).unwrap();
        let (mut plain, mut out) = (Vec::new(), Vec::new());
        for piece in pieces(&wire, &cuts) {
            let before = out.len();
            if let Err(e) = layer.input(piece, &mut plain, &mut out) {
                // The call may have answered a valid start first (the
                // server's flight); what it added last is the alert: in
                // the clear (21), or sealed once TLS 1.3's keys are set (23).
                let last = last_record_type(&out[before..]);
                prop_assert!(matches!(last, None | Some(21) | Some(23)), "{e}: ends with record type {:?}", last);
                break;
            }
        }
        prop_assert!(plain.is_empty(), "no application data before a handshake");
    }
}
