//! The layer itself: rustls's unbuffered connection driven by the
//! runtime's events. Ciphertext is sealed straight into the connection's
//! output queue, and the runtime's own buffers hold everything else, so
//! no limit of rustls's buffered API (its 16 KiB plaintext and 64 KiB
//! ciphertext queues) stands between a handler and the wire.

use iomux::runtime::{Layer, LayerEvents};
use iomux::Error;
use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncodeTlsData, EncryptError, UnbufferedStatus, WriteTraffic};
use rustls::{CommonState, HandshakeKind};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Handshakes completed by the layers that share it (one loop's: its
/// atomics are never contended).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub full: AtomicU64,
    pub resumed: AtomicU64,
}

/// Received ciphertext the layer keeps unprocessed at most. rustls
/// discards nothing of a handshake message it is still joining (up to 64
/// KiB): in full-size records, with the records where it begins and where
/// the next begins and one still arriving, about 96 KiB. A peer that
/// splits messages into tiny records (a 64 KiB message in 1-byte records
/// is 384 KiB) is refused past this: it would hold that much per
/// connection for as long as the handshake timeout.
const MAX_KEPT: usize = 128 << 10;

mod sealed {
    pub trait Sealed {}
    impl Sealed for rustls::server::UnbufferedServerConnection {}
    impl Sealed for rustls::client::UnbufferedClientConnection {}
}

/// rustls's server and client unbuffered connections, which share no
/// trait for `process_tls_records` (sealed: only these two).
pub trait Records: sealed::Sealed + 'static {
    /// rustls's side-specific state.
    type Data: 'static;
    /// `process_tls_records`.
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
    /// The state both sides share.
    fn common(&self) -> &CommonState;
}

impl Records for UnbufferedServerConnection {
    type Data = rustls::server::ServerConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &CommonState {
        self
    }
}

impl Records for UnbufferedClientConnection {
    type Data = rustls::client::ClientConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &CommonState {
        self
    }
}

/// A TLS layer on one connection: rustls's state, the ciphertext of an
/// incomplete record, and plaintext written before the handshake.
pub struct TlsLayer<C: Records> {
    conn: C,
    /// Received ciphertext rustls has not consumed yet: an incomplete
    /// record, or the records of a handshake message still being joined
    /// (at most [`MAX_KEPT`]); empty, and freed, between records.
    partial: Vec<u8>,
    /// Plaintext written before the handshake completed.
    held: Vec<u8>,
    established: bool,
    /// Our close was asked for during the handshake.
    close_after_handshake: bool,
    /// The peer's close_notify came: a FIN after it is in order.
    peer_closed: bool,
    /// rustls failed: it is not driven again (a second pass over the bad
    /// input would make a second fatal alert).
    failed: bool,
    client: bool,
    /// Where a completed handshake is counted, if anywhere.
    counters: Option<Arc<Counters>>,
}

impl<C: Records> TlsLayer<C> {
    pub(crate) fn new(conn: C, client: bool) -> TlsLayer<C> {
        TlsLayer {
            conn,
            partial: Vec::new(),
            held: Vec::new(),
            established: false,
            close_after_handshake: false,
            peer_closed: false,
            failed: false,
            client,
            counters: None,
        }
    }

    /// Counts this layer's handshake in `counters` once it completes.
    pub(crate) fn counted_in(mut self: Box<Self>, counters: &Arc<Counters>) -> Box<Self> {
        self.counters = Some(counters.clone());
        self
    }

    /// rustls's view of the connection: the negotiated protocol, version,
    /// cipher suite, whether it resumed.
    pub fn state(&self) -> &CommonState {
        self.conn.common()
    }

    /// Whether the handshake resumed an earlier session (a ticket).
    pub fn resumed(&self) -> bool {
        self.conn.common().handshake_kind() == Some(HandshakeKind::Resumed)
    }

    /// Drives rustls over `self.partial` until it needs more input,
    /// appending handshake records to `out` and plaintext to `plain`;
    /// keeps what it has not consumed (an incomplete record, or records of
    /// a handshake message not complete yet).
    fn pump(&mut self, plain: &mut Vec<u8>, out: &mut Vec<u8>, events: &mut LayerEvents) -> Result<(), Error> {
        let mut start = 0;
        let result: Result<(), Error> = 'pump: loop {
            let UnbufferedStatus { mut discard, state } = self.conn.process(&mut self.partial[start..]);
            match state {
                Err(e) => {
                    start += discard;
                    break Err(tls_error(&e));
                }
                Ok(ConnectionState::ReadTraffic(mut records)) => {
                    while let Some(record) = records.next_record() {
                        match record {
                            Ok(record) => {
                                discard += record.discard;
                                plain.extend_from_slice(record.payload);
                            }
                            Err(e) => {
                                start += discard;
                                break 'pump Err(tls_error(&e));
                            }
                        }
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    if let Err(e) = encode_into(&mut encode, out) {
                        start += discard;
                        break Err(e);
                    }
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(), // the runtime sends `out`
                Ok(ConnectionState::PeerClosed) => {
                    self.peer_closed = true;
                    events.peer_closed = true;
                }
                // WriteTraffic, BlockedHandshake, Closed: more input is
                // needed (early data, the remaining state, is off).
                Ok(_) => {
                    start += discard;
                    break Ok(());
                }
            }
            start += discard;
        };
        self.partial.drain(..start);
        if self.partial.is_empty() && self.partial.capacity() > 0 {
            self.partial = Vec::new(); // an idle connection owns no buffer
        } else if self.partial.capacity() > 4 * MAX_KEPT {
            // Not a whole io_uring batch's size for a record's remainder;
            // below this the buffer is kept (no realloc per receive).
            self.partial.shrink_to(MAX_KEPT);
        }
        result?;
        if self.partial.len() > MAX_KEPT {
            return Err(refused(&format!("the peer sent over {} KiB without completing a message", MAX_KEPT >> 10)));
        }
        if !self.established && !self.conn.common().is_handshaking() {
            self.established = true;
            events.established = true;
            if let Some(counters) = &self.counters {
                let kind = if self.resumed() { &counters.resumed } else { &counters.full };
                kind.fetch_add(1, Ordering::Relaxed);
            }
            let held = std::mem::take(&mut self.held);
            let close = self.close_after_handshake;
            self.writing(out, |write, out| {
                encrypt_into(write, &held, out)?;
                if close {
                    close_notify_into(write, out)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// An error once rustls has failed: it is not driven again.
    fn usable(&self) -> Result<(), Error> {
        if self.failed {
            return Err(refused("the connection already failed"));
        }
        Ok(())
    }

    /// rustls failed: what it queued before failing (its flight so far,
    /// then the one fatal alert, if it made one) goes into `out`.
    fn alert_into(&mut self, out: &mut Vec<u8>) {
        // Only while rustls has records queued: a call with none queued
        // would deframe the bad input again and fail once more (a second
        // fatal alert). The buffer passed is the one its deframer counts
        // positions in (an empty one would be indexed past its end while
        // a handshake message is being joined).
        for _ in 0..64 {
            if !self.conn.common().wants_write() {
                return;
            }
            let UnbufferedStatus { state, .. } = self.conn.process(&mut self.partial[..]);
            match state {
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    if encode_into(&mut encode, out).is_err() {
                        return;
                    }
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => transmit.done(),
                _ => return,
            }
        }
    }

    /// Runs `f` with rustls's write state, once rustls has sent what it
    /// had to send first; None if the connection cannot write (closed).
    fn writing<R>(
        &mut self,
        out: &mut Vec<u8>,
        f: impl FnOnce(&mut WriteTraffic<'_, C::Data>, &mut Vec<u8>) -> Result<R, Error>,
    ) -> Result<Option<R>, Error> {
        loop {
            // Only an incomplete record waits in `partial` once the
            // handshake is done: nothing is consumed here.
            let UnbufferedStatus { state, .. } = self.conn.process(&mut self.partial[..]);
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    self.failed = true;
                    return Err(tls_error(&e));
                }
            };
            match state {
                ConnectionState::EncodeTlsData(mut encode) => encode_into(&mut encode, out)?,
                ConnectionState::TransmitTlsData(transmit) => transmit.done(),
                ConnectionState::PeerClosed => self.peer_closed = true,
                ConnectionState::WriteTraffic(mut write) => return f(&mut write, out).map(Some),
                _ => return Ok(None),
            }
        }
    }
}

impl<C: Records> Layer for TlsLayer<C> {
    fn name(&self) -> &'static str {
        "tls"
    }

    fn input(&mut self, wire: &[u8], plain: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<LayerEvents, Error> {
        self.usable()?;
        self.partial.extend_from_slice(wire);
        let mut events = LayerEvents::default();
        if let Err(e) = self.pump(plain, out, &mut events) {
            self.failed = true;
            self.alert_into(out);
            return Err(e);
        }
        Ok(events)
    }

    fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        self.usable()?;
        if !self.established {
            self.held.extend_from_slice(plain);
            return Ok(());
        }
        match self.writing(out, |write, out| encrypt_into(write, plain, out))? {
            Some(()) => Ok(()),
            None => Err(refused("the connection cannot send application data any more")),
        }
    }

    fn established(&self) -> bool {
        self.established
    }

    fn start(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.usable()?;
        if !self.client {
            return Ok(());
        }
        // The ClientHello waits in rustls from the connection's creation.
        let mut events = LayerEvents::default();
        self.pump(&mut Vec::new(), out, &mut events)
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return; // its alert was the last word
        }
        if !self.established {
            self.close_after_handshake = true;
            return;
        }
        // A close_notify that cannot be sealed leaves a FIN alone: the
        // peer then sees an unclean end, which is all that can be said.
        let _ = self.writing(out, close_notify_into);
    }

    fn peer_fin(&mut self) -> Result<(), Error> {
        if self.peer_closed {
            return Ok(()); // its close_notify came first
        }
        if !self.established {
            return Err(refused("the peer ended its input during the handshake"));
        }
        if !self.partial.is_empty() {
            return Err(refused("the peer's input ended inside a record (truncated)"));
        }
        // A FIN without close_notify at a record boundary: an end of input
        // many clients send (HTTP/1.1 with its own framing); the handler
        // hears it as one.
        Ok(())
    }

    fn held(&self) -> usize {
        self.held.len()
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// Encodes a handshake record at the end of `out`.
fn encode_into<D>(encode: &mut EncodeTlsData<'_, D>, out: &mut Vec<u8>) -> Result<(), Error> {
    // A large certificate chain asks for exactly the room it needs.
    let needs = |e: &EncodeError| match e {
        EncodeError::InsufficientSize(e) => Some(e.required_size),
        _ => None,
    };
    append_with(out, 4096, needs, |room| encode.encode(room))
}

/// What an encryption asks for more room.
fn encrypt_needs(e: &EncryptError) -> Option<usize> {
    match e {
        EncryptError::InsufficientSize(e) => Some(e.required_size),
        _ => None,
    }
}

/// Encrypts `plain` into records at the end of `out`.
fn encrypt_into<D>(write: &mut WriteTraffic<'_, D>, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
    if plain.is_empty() {
        return Ok(());
    }
    // Each record of up to 16 KiB adds a header, a content type and a tag
    // (22 bytes in TLS 1.3 with AES-GCM; TLS 1.2's explicit nonce, 29).
    let room = plain.len() + (plain.len() / (16 << 10) + 1) * 64;
    append_with(out, room, encrypt_needs, |room| write.encrypt(plain, room))
}

fn close_notify_into<D>(write: &mut WriteTraffic<'_, D>, out: &mut Vec<u8>) -> Result<(), Error> {
    append_with(out, 64, encrypt_needs, |room| write.queue_close_notify(room))
}

/// Appends what `fill` writes into room at the end of `out`: `room` bytes
/// first, then as many as its error says it needs (`needs`), if more.
/// Nothing is appended when it fails.
fn append_with<E: std::fmt::Display>(
    out: &mut Vec<u8>,
    mut room: usize,
    needs: impl Fn(&E) -> Option<usize>,
    mut fill: impl FnMut(&mut [u8]) -> Result<usize, E>,
) -> Result<(), Error> {
    let at = out.len();
    loop {
        out.resize(at + room, 0);
        match fill(&mut out[at..]) {
            Ok(n) => {
                out.truncate(at + n);
                return Ok(());
            }
            Err(e) => match needs(&e) {
                Some(required) if required > room => room = required,
                _ => {
                    out.truncate(at);
                    return Err(refused(&e.to_string()));
                }
            },
        }
    }
}

pub(crate) fn tls_error(e: &rustls::Error) -> Error {
    refused(&e.to_string())
}

pub(crate) fn refused(reason: &str) -> Error {
    Error::Layer { layer: "tls", reason: reason.to_string() }
}
