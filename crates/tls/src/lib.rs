//! TLS for [`iomux`]'s runtime, on rustls: any [`Handler`] served over
//! TLS unchanged, on every backend, with the runtime's semantics intact
//! (the output's bound, pauses, half-close with close_notify, deadlines,
//! the stop), and TLS clients for outbound connections.
//!
//! The layer drives rustls's unbuffered API from the runtime's events:
//! ciphertext is sealed straight into the connection's output queue and
//! decrypted plaintext is offered to the handler as any input is. This
//! kernel has no kernel TLS, so TLS runs in user space, as in most
//! deployments.
//!
//! ```no_run
//! use iomux::runtime::{ConnId, Handler, Io, Runtime, Config};
//! use iomux_tls::{certs, Tls};
//!
//! struct Echo;
//!
//! impl Handler for Echo {
//!     type Conn = ();
//!     type Message = ();
//!     fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
//!     fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
//!         let _ = io.write(conn, data); // encrypted on its way out
//!         data.len()
//!     }
//! }
//!
//! let config = certs::server_config(&certs::self_signed(&["localhost"])?, &[])?;
//! let runtime = Runtime::new(Config::default(), 1)?.bind("127.0.0.1:8443".parse()?)?;
//! runtime.run(move |_| Tls::new(Echo, config.clone()))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod certs;
mod records;
mod sni;

pub use records::{Records, TlsLayer};
pub use rustls;

use iomux::runtime::{CloseReason, ConnId, Handler, Io, TimerId};
use iomux::Error;
use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::ServerName;
use rustls::server::UnbufferedServerConnection;
use rustls::{ClientConfig, ProtocolVersion, ServerConfig};
use std::sync::Arc;

/// The layer of an accepted TLS connection.
pub type ServerLayer = TlsLayer<UnbufferedServerConnection>;
/// The layer of an outbound TLS connection.
pub type ClientLayer = TlsLayer<UnbufferedClientConnection>;

/// A server-side TLS layer for [`Io::set_layer`], from a shared config.
pub fn server_layer(config: &Arc<ServerConfig>) -> Result<Box<ServerLayer>, Error> {
    let conn = UnbufferedServerConnection::new(config.clone()).map_err(|e| records::tls_error(&e))?;
    Ok(Box::new(TlsLayer::new(conn, false)))
}

/// A client-side TLS layer for [`Io::set_layer`] right after
/// [`Io::connect`]: the handshake starts once connected, for `name`
/// (SNI, and the name the certificate must carry). One config per loop
/// keeps its session cache, so later connections resume.
pub fn client_layer(config: &Arc<ClientConfig>, name: ServerName<'static>) -> Result<Box<ClientLayer>, Error> {
    let conn = UnbufferedClientConnection::new(config.clone(), name).map_err(|e| records::tls_error(&e))?;
    Ok(Box::new(TlsLayer::new(conn, true)))
}

/// What a TLS connection negotiated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsInfo {
    /// TLS 1.2 or 1.3, once the handshake is done.
    pub version: Option<ProtocolVersion>,
    /// The protocol ALPN chose (`b"http/1.1"`), if any.
    pub alpn: Option<Vec<u8>>,
    /// The handshake resumed an earlier session.
    pub resumed: bool,
    /// The handshake is complete.
    pub established: bool,
}

/// What connection `conn`'s TLS layer negotiated; None for a plaintext
/// or closed connection.
pub fn info<S>(io: &mut Io<S>, conn: ConnId) -> Option<TlsInfo> {
    fn of<C: Records>(layer: &TlsLayer<C>) -> TlsInfo {
        let state = layer.state();
        TlsInfo {
            version: state.protocol_version(),
            alpn: state.alpn_protocol().map(<[u8]>::to_vec),
            resumed: layer.resumed(),
            established: !state.is_handshaking(),
        }
    }
    if let Some(layer) = io.layer::<ServerLayer>(conn) {
        return Some(of(layer));
    }
    io.layer::<ClientLayer>(conn).map(|layer| of(layer))
}

/// Serves handler `H` over TLS: every accepted connection gets a server
/// layer before `H` hears of it, and `H` sees only plaintext. Outbound
/// connections `H` opens stay as `H` makes them ([`client_layer`]).
pub struct Tls<H> {
    inner: H,
    config: Arc<ServerConfig>,
    counters: Arc<records::Counters>,
    /// Connections refused because no layer could be made for them.
    pub refused: u64,
    /// Connections closed by the layer's error or by the handshake
    /// timeout: an alert sent or received, a record that does not decrypt,
    /// and a FIN during the handshake or inside a record (a client that
    /// gives up, or a TCP health check, counts here too; a reset does not).
    pub failed: u64,
}

/// Handshakes a [`Tls`] server completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handshakes {
    /// With a certificate and a key exchange.
    pub full: u64,
    /// Resuming an earlier session (a ticket, or TLS 1.2's cache).
    pub resumed: u64,
}

impl<H> Tls<H> {
    /// `inner` served with `config` (see [`certs::server_config`]).
    pub fn new(inner: H, config: Arc<ServerConfig>) -> Tls<H> {
        Tls { inner, config, counters: Arc::default(), refused: 0, failed: 0 }
    }

    /// The handshakes its connections have completed so far.
    pub fn handshakes(&self) -> Handshakes {
        use std::sync::atomic::Ordering::Relaxed;
        Handshakes { full: self.counters.full.load(Relaxed), resumed: self.counters.resumed.load(Relaxed) }
    }

    /// The handler inside.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// The handler inside, for its figures after the run.
    pub fn into_inner(self) -> H {
        self.inner
    }
}

impl<H: Handler> Handler for Tls<H> {
    type Conn = H::Conn;
    type Message = H::Message;

    fn on_start(&mut self, io: &mut Io<Self::Conn>) {
        self.inner.on_start(io)
    }

    fn on_accept(&mut self, io: &mut Io<Self::Conn>, conn: ConnId) -> Self::Conn {
        let layered = server_layer(&self.config).map(|layer| io.set_layer(conn, layer.counted_in(&self.counters)));
        if !matches!(layered, Ok(true)) {
            // Never in the clear: without its layer the connection goes.
            self.refused += 1;
            io.abort(conn);
        }
        self.inner.on_accept(io, conn)
    }

    fn on_connect(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, state: &mut Self::Conn) {
        self.inner.on_connect(io, conn, state)
    }

    fn on_data(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, state: &mut Self::Conn, data: &[u8]) -> usize {
        self.inner.on_data(io, conn, state, data)
    }

    fn on_read_closed(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, state: &mut Self::Conn) {
        self.inner.on_read_closed(io, conn, state)
    }

    fn on_drained(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, state: &mut Self::Conn) {
        self.inner.on_drained(io, conn, state)
    }

    fn on_close(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, state: Self::Conn, reason: &CloseReason) {
        if matches!(reason, CloseReason::Layer(_) | CloseReason::HandshakeTimeout) {
            self.failed += 1;
        }
        self.inner.on_close(io, conn, state, reason)
    }

    fn on_deadline(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, state: &mut Self::Conn) {
        self.inner.on_deadline(io, conn, state)
    }

    fn on_message(&mut self, io: &mut Io<Self::Conn>, msg: Self::Message) {
        self.inner.on_message(io, msg)
    }

    fn on_room(&mut self, io: &mut Io<Self::Conn>, loop_index: usize) {
        self.inner.on_room(io, loop_index)
    }

    fn on_timer(&mut self, io: &mut Io<Self::Conn>, timer: TimerId, token: u64) {
        self.inner.on_timer(io, timer, token)
    }

    fn on_refused(&mut self, error: &Error) {
        self.inner.on_refused(error)
    }
}
