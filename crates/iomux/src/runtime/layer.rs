//! [`Layer`]: a rewriting of a connection's bytes between the socket and
//! the handler (TLS, in the `iomux-tls` crate), run by the core itself so
//! that every semantic of the runtime (the output's bound, pauses,
//! half-close, deadlines, the stop) holds through it unchanged, and a
//! handler written for plaintext runs over it as it is.
//!
//! The core routes a layered connection's bytes through its layer: what
//! the peer sends goes to [`Layer::input`], and only the plaintext it
//! yields reaches [`Handler::on_data`](super::Handler::on_data); what the
//! handler writes goes to [`Layer::seal`], and only its sealed form is
//! queued. A plaintext connection never enters this path: the core tells
//! the two apart by a bit it already tests on every write and read.

use crate::error::Error;
use std::any::Any;

/// What a connection's bytes go through between the socket and the
/// handler: a handshake, then records both ways, then a closing record.
/// Set on a connection by [`Io::set_layer`](super::Io::set_layer).
///
/// Every method appends to `out`, the connection's output queue, what
/// must be sent (a handshake message, a sealed record, an alert): no
/// copy is made after it. An error closes the connection with
/// [`CloseReason::Layer`](super::CloseReason::Layer), after what the
/// failing call appended to `out` (an alert) is sent.
///
/// A toy layer that XORs each byte, with no handshake:
///
/// ```
/// use iomux::runtime::{Layer, LayerEvents};
/// use iomux::Error;
///
/// struct Xor(u8);
///
/// impl Layer for Xor {
///     fn name(&self) -> &'static str {
///         "xor"
///     }
///     fn input(&mut self, wire: &[u8], plain: &mut Vec<u8>, _out: &mut Vec<u8>) -> Result<LayerEvents, Error> {
///         plain.extend(wire.iter().map(|b| b ^ self.0));
///         Ok(LayerEvents::default())
///     }
///     fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
///         out.extend(plain.iter().map(|b| b ^ self.0));
///         Ok(())
///     }
///     fn established(&self) -> bool {
///         true // no handshake
///     }
///     fn as_any(&mut self) -> &mut dyn std::any::Any {
///         self
///     }
/// }
/// ```
pub trait Layer: 'static {
    /// A short name for errors and stats ("tls").
    fn name(&self) -> &'static str;

    /// The peer's bytes arrived, exactly as received, in order. Appends
    /// the plaintext they complete to `plain`, and anything to send back
    /// (handshake messages, alerts) to `out`; keeps an incomplete record
    /// for the next call. Says whether the handshake completed in this
    /// call and whether the peer closed its side in order.
    fn input(&mut self, wire: &[u8], plain: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<LayerEvents, Error>;

    /// The handler wrote `plain`: appends its sealed form to `out`. Before
    /// the handshake completes it keeps the bytes instead ([`Layer::held`])
    /// and appends them, sealed and in order, when [`Layer::input`]
    /// completes the handshake.
    fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error>;

    /// Whether the handshake has completed (a layer without one: always).
    fn established(&self) -> bool;

    /// The handshake may begin: an outbound connection just connected, or
    /// the layer was set on an established connection (STARTTLS), and the
    /// layer is not [established](Layer::established) yet. A client layer
    /// appends its opening flight (a TLS ClientHello) to `out`; a server
    /// layer waits for the peer's and appends nothing.
    fn start(&mut self, _out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(())
    }

    /// Our side ends (a shutdown of the write side, a close, the loop's
    /// stop): appends the closing record (a TLS close_notify) to `out`, or,
    /// during the handshake, appends it after the held bytes once the
    /// handshake completes. The FIN follows once `out` is sent.
    fn close(&mut self, _out: &mut Vec<u8>) {}

    /// The peer's FIN came without its closing record. Ok: an end of input
    /// like any other; an error (a truncation attack, the end of a
    /// handshake) closes the connection with it.
    fn peer_fin(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Plaintext written before the handshake completed and kept until then.
    fn held(&self) -> usize {
        0
    }

    /// The layer itself, for [`Io::layer`](super::Io::layer) to hand back
    /// as its own type (a TLS layer's negotiated protocol, for example).
    fn as_any(&mut self) -> &mut dyn Any;
}

/// What one [`Layer::input`] call brought besides plaintext.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerEvents {
    /// The handshake completed in this call.
    pub established: bool,
    /// The peer ended its side in order (a TLS close_notify): after the
    /// plaintext of this call, the handler hears of its end of input.
    pub peer_closed: bool,
}

/// A connection's layer and what the core keeps beside it.
pub(crate) struct Layered {
    pub(crate) layer: Box<dyn Layer>,
    /// An outbound connection's [`Handler::on_connect`](super::Handler::on_connect)
    /// waits for the handshake.
    pub(crate) connect_deferred: bool,
    /// The layer failed: it is driven no more.
    pub(crate) failed: bool,
    /// Why it failed, for the close once its alert is sent.
    pub(crate) failure: Option<Error>,
    /// [`Layer::close`] was called: it is called once.
    pub(crate) closed: bool,
}
