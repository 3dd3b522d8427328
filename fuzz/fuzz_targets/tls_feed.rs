//! The TLS server layer (iomux-tls on rustls) on arbitrary bytes, as a
//! connection's input: the first byte seeds the chunk sizes, the rest is
//! the stream. It must never panic, yield no application data (no
//! handshake can complete without the client's keys), and once it
//! refuses the input, stay refused.
#![no_main]

mod chunks;

use iomux::runtime::Layer;
use iomux_tls::rustls::ServerConfig;
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

/// One certificate for every input: making one per input would be most
/// of the time.
fn config() -> &'static Arc<ServerConfig> {
    static CONFIG: OnceLock<Arc<ServerConfig>> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let identity = iomux_tls::certs::self_signed(&["localhost"]).expect("a certificate");
        iomux_tls::certs::server_config(&identity, &[b"http/1.1"]).expect("a server config")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else { return };
    let mut layer = iomux_tls::server_layer(config()).expect("a layer");
    let (mut plain, mut out) = (Vec::new(), Vec::new());
    let mut at = 0;
    for size in chunks::sizes(seed) {
        if at >= stream.len() {
            break;
        }
        let end = (at + size).min(stream.len());
        if layer.input(&stream[at..end], &mut plain, &mut out).is_err() {
            assert!(layer.input(b"\x16\x03\x01\x00\x00", &mut plain, &mut out).is_err(), "refused, then accepted");
            break;
        }
        at = end;
    }
    assert!(plain.is_empty(), "application data without a handshake");
    let _ = layer.peer_fin();
});
