//! Layered connections ([`Io::set_layer`]): the core's side of a
//! [`Layer`]. Everything here runs only for a layered connection; the
//! plaintext paths reach it through a flag test they already make.

use super::super::layer::{Layer, LayerEvents, Layered};
use super::super::{CloseReason, ConnId};
use super::{Io, CLOSING, CONNECTING, DOOMED, HANDSHAKING, LAYERED, LINGER, SWITCHED, WRITE_CLOSED, WRITE_SHUT};
use crate::error::Error;
use std::time::Instant;

impl<S> Io<S> {
    /// Puts `layer` (TLS: the `iomux-tls` crate) between the connection's
    /// socket and the handler: from now on [`Handler::on_data`](super::super::Handler::on_data)
    /// is offered only the plaintext the layer yields, and every write is
    /// sealed by the layer before it is queued. The output's bound,
    /// pauses, [`Io::shutdown_write`] (the layer's closing record, then
    /// FIN), [`Io::close`], deadlines and the stop hold as for plaintext.
    ///
    /// Set it in [`Handler::on_accept`](super::super::Handler::on_accept),
    /// or right after [`Io::connect`] (the layer then starts its handshake
    /// once connected, and [`Handler::on_connect`](super::super::Handler::on_connect)
    /// waits for the handshake), or later on an established connection
    /// (STARTTLS: a client layer starts its handshake at once). Output
    /// written before it goes out as it was, before anything sealed: a
    /// server answering a STARTTLS command writes its go-ahead, then sets
    /// the layer. Input the handler left unconsumed when it set the layer
    /// from its `on_data` closes the connection with
    /// [`CloseReason::Layer`]: bytes pipelined in the clear after a
    /// STARTTLS are an injection, refused as mail servers refuse it.
    ///
    /// Until the handshake completes the connection is read even while
    /// the handler pauses it; writes are held by the layer (they count in
    /// [`Io::buffered`]); [`Io::close`] waits for the handshake, so what
    /// was written goes out; a handshake not complete within
    /// [`ConfigBuilder::handshake_timeout`](super::super::ConfigBuilder::handshake_timeout)
    /// closes the connection with [`CloseReason::HandshakeTimeout`].
    ///
    /// Returns false, and nothing changes, if the connection is gone,
    /// closing, shut for writing, already layered, splicing either way
    /// ([`Io::splice`]), or holds input in the clear not offered yet
    /// (reading paused: set it from the connection's own `on_data`).
    #[must_use = "false: the connection's bytes are not layered"]
    pub fn set_layer(&mut self, conn: ConnId, layer: Box<dyn Layer>) -> bool {
        let fed = self.feeders.contains_key(&conn);
        let Some(c) = self.conns.get_mut(conn) else { return false };
        let busy = c.layered.is_some() || c.splice.is_some() || fed || !c.pending_in.is_empty();
        if busy || c.flags & (CLOSING | DOOMED | WRITE_SHUT) != 0 {
            return false;
        }
        let established = layer.established();
        let connecting = c.has(CONNECTING);
        let connect_deferred = connecting && !established;
        c.layered = Some(Box::new(Layered { layer, connect_deferred, failed: false, failure: None, closed: false }));
        c.flags |= LAYERED;
        if c.state.is_none() {
            // From one of its own callbacks, which holds its unconsumed
            // input: checked when the callback hands it back (put_back).
            c.flags |= SWITCHED;
        }
        if !established {
            c.flags |= HANDSHAKING;
            self.handshake_deadlines.push(Instant::now() + self.cfg.handshake_timeout, conn);
        }
        if !connecting && !established {
            self.start_layer(conn); // a client's opening flight (none for a server)
        }
        self.mark_dirty(conn); // reading goes on through the handshake
        true
    }

    /// The connection's layer as its own type (None for another type, a
    /// plaintext connection or a closed one): what a TLS layer negotiated,
    /// for example.
    pub fn layer<T: Layer>(&mut self, conn: ConnId) -> Option<&mut T> {
        self.conns.get_mut(conn)?.layered.as_mut()?.layer.as_any().downcast_mut()
    }

    /// Whether the connection's bytes go through a layer.
    pub(crate) fn is_layered(&self, id: ConnId) -> bool {
        self.conns.get(id).is_some_and(|c| c.has(LAYERED))
    }

    /// An outbound connection whose on_connect waits for its handshake.
    pub(crate) fn connect_deferred(&self, id: ConnId) -> bool {
        self.conns.get(id).and_then(|c| c.layered.as_ref()).is_some_and(|l| l.connect_deferred)
    }

    /// [`Io::write`] on a connection that is layered, closing or shut:
    /// sealed by the layer, or refused.
    #[cold]
    pub(super) fn write_layered(&mut self, conn: ConnId, data: &[u8]) -> bool {
        let Some(c) = self.conns.get_mut(conn) else { return false };
        if c.flags & (DOOMED | CLOSING | WRITE_SHUT) != 0 {
            return false; // after close, shutdown_write or a stop, nothing more goes out
        }
        let Some(l) = c.layered.as_mut() else { return false };
        if data.is_empty() {
            return true;
        }
        if c.out.capacity() == 0 {
            if let Some(buf) = self.pool.pop() {
                c.out = buf;
            }
        }
        let before = c.out.len();
        let sealed = l.layer.seal(data, &mut c.out);
        let grew = c.out.len() != before;
        if grew {
            self.queued_more(conn);
        }
        match sealed {
            Ok(()) => true,
            Err(e) => {
                self.layer_failed(conn, e, grew);
                false
            }
        }
    }

    /// [`Io::write_with`] on a connection that is layered, closing or
    /// shut: the closure's bytes are sealed, or it is not called.
    #[cold]
    pub(super) fn write_with_layered<R>(&mut self, conn: ConnId, f: impl FnOnce(&mut Vec<u8>) -> R) -> Option<R> {
        let c = self.conns.get(conn)?;
        if c.flags & (DOOMED | CLOSING | WRITE_SHUT) != 0 {
            return None;
        }
        let mut fresh = self.pool.pop().unwrap_or_default();
        let result = f(&mut fresh);
        let sealed = self.write_layered(conn, &fresh);
        self.recycle(fresh);
        sealed.then_some(result)
    }

    /// Our side ends: the layer's closing record goes before the FIN
    /// (once per connection; none after the layer failed: its alert was
    /// the last word).
    pub(super) fn seal_close(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(conn) else { return };
        let Some(l) = c.layered.as_mut() else { return };
        if l.closed || l.failed {
            return;
        }
        l.closed = true;
        let before = c.out.len();
        l.layer.close(&mut c.out);
        if c.out.len() != before {
            self.queued_more(conn);
        }
    }

    /// An outbound layered connection is connected: the layer's opening
    /// flight is queued first.
    pub(super) fn start_layer(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(id) else { return };
        let Some(l) = c.layered.as_mut() else { return };
        let before = c.out.len();
        let started = l.layer.start(&mut c.out);
        let grew = c.out.len() != before;
        if grew {
            self.queued_more(id);
        }
        if let Err(e) = started {
            self.layer_failed(id, e, grew);
        }
    }

    /// Hands received bytes to the connection's layer: its plaintext into
    /// `plain`, its answers into the output. None when nothing more is to
    /// be done with them: discarded (lingering, closing after the
    /// handshake) or the layer failed.
    pub(crate) fn layer_input(&mut self, id: ConnId, wire: &[u8], plain: &mut Vec<u8>) -> Option<LayerEvents> {
        let c = self.conns.get_mut(id)?;
        if c.flags & (DOOMED | LINGER) != 0 || (c.has(CLOSING) && !c.has(HANDSHAKING)) {
            return None;
        }
        let l = c.layered.as_mut()?;
        if l.failed {
            return None;
        }
        let before = c.out.len();
        let result = l.layer.input(wire, plain, &mut c.out);
        let grew = c.out.len() != before;
        if grew {
            self.queued_more(id);
        }
        match result {
            Ok(events) => Some(events),
            Err(e) => {
                self.layer_failed(id, e, grew);
                None
            }
        }
    }

    /// The layer's handshake completed: reading, draining notices and a
    /// close or FIN that waited go on. Returns whether the handler's
    /// on_connect waited for it (an outbound connection).
    pub(crate) fn established(&mut self, id: ConnId) -> bool {
        let Some(c) = self.conns.get_mut(id) else { return false };
        if !c.has(HANDSHAKING) {
            return false;
        }
        c.flags &= !HANDSHAKING;
        let deferred = c.layered.as_mut().is_some_and(|l| std::mem::take(&mut l.connect_deferred));
        self.drained_if_due(id);
        if self.conns.get(id).is_some_and(|c| c.has(CLOSING) && c.buffered() == 0) {
            self.linger(id); // a close that waited, with nothing to send
        } else {
            self.fin_if_sent(id);
        }
        self.mark_dirty(id);
        deferred
    }

    /// The layer refused the peer's bytes or ours: it is driven no more,
    /// and the connection closes with [`CloseReason::Layer`], after the
    /// alert the failing call queued (`alert`) is sent, unless our FIN
    /// already went; nothing more is read or delivered.
    pub(crate) fn layer_failed(&mut self, id: ConnId, e: Error, alert: bool) {
        let Some(c) = self.conns.get_mut(id) else { return };
        if c.has(DOOMED) {
            return;
        }
        c.flags &= !HANDSHAKING;
        let after_fin = c.has(WRITE_CLOSED);
        let Some(l) = c.layered.as_mut() else { return self.doom(id, CloseReason::Layer(e)) };
        l.failed = true;
        if !alert || after_fin {
            return self.doom(id, CloseReason::Layer(e));
        }
        l.failure = Some(e);
        if c.has(CLOSING) {
            self.mark_dirty(id); // it stops reading; on_empty lingers
        } else {
            self.close(id);
        }
    }

    /// Input was left unconsumed in the clear when the handler set a layer
    /// from its callback: refused (see [`Io::set_layer`]).
    pub(crate) fn cleartext_after_switch(&mut self, id: ConnId) {
        let layer = self.conns.get(id).and_then(|c| c.layered.as_ref()).map_or("layer", |l| l.layer.name());
        let e = Error::Layer { layer, reason: "bytes followed the switch to the layer in the clear".into() };
        self.doom(id, CloseReason::Layer(e));
    }

    /// A handshake deadline passed: a connection still handshaking closes.
    pub(crate) fn handshake_deadline(&mut self, id: ConnId) {
        if self.conns.get(id).is_some_and(|c| c.has(HANDSHAKING)) {
            self.doom(id, CloseReason::HandshakeTimeout);
        }
    }

    /// Drops the handshake deadlines at the front whose connections
    /// completed their handshake or closed: they would wake the loop for
    /// nothing.
    pub(crate) fn prune_handshake_deadlines(&mut self) {
        if self.handshake_deadlines.next_deadline().is_none() {
            return; // no layered connection handshaking: the common case
        }
        let mut deadlines = std::mem::take(&mut self.handshake_deadlines);
        deadlines.prune_front(|id| self.conns.get(id).is_none_or(|c| !c.has(HANDSHAKING) || c.has(DOOMED)));
        self.handshake_deadlines = deadlines;
    }
}
