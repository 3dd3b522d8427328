//! [`Handler`]: a protocol, written once for every backend.

use super::{CloseReason, ConnId, Io, TimerId};
use crate::error::Error;

/// A protocol, written once for every backend.
///
/// The loop calls these methods on its own thread; each receives the
/// loop's [`Io`] to write, close, connect, set timers or stop. Every
/// connection carries a [`Handler::Conn`] state owned by the loop: made by
/// [`on_accept`](Handler::on_accept) (or handed to [`Io::connect`]), lent to
/// each callback, and handed back by value to
/// [`on_close`](Handler::on_close), exactly once.
///
/// ```
/// use iomux::runtime::{ConnId, Handler, Io};
///
/// /// Echoes every byte and counts them per connection.
/// struct Echo;
///
/// impl Handler for Echo {
///     type Conn = u64; // bytes echoed on this connection
///     type Message = (); // no messages from other loops
///
///     fn on_accept(&mut self, _io: &mut Io<u64>, _conn: ConnId) -> u64 {
///         0
///     }
///
///     fn on_data(&mut self, io: &mut Io<u64>, conn: ConnId, echoed: &mut u64, data: &[u8]) -> usize {
///         let _ = io.write(conn, data); // false only once the connection is closing
///         *echoed += data.len() as u64;
///         data.len() // all consumed
///     }
/// }
/// ```
pub trait Handler {
    /// Per-connection state (use `()` for none).
    type Conn;

    /// What other loops and threads send this loop through a
    /// [`Sender`](super::Sender) (use `()` when nothing is sent). It
    /// crosses threads, so it is `Send`.
    type Message: Send + 'static;

    /// The loop is set up and about to wait for the first time: a client
    /// opens its first connections here.
    fn on_start(&mut self, _io: &mut Io<Self::Conn>) {}

    /// A connection was accepted; returns its state.
    fn on_accept(&mut self, io: &mut Io<Self::Conn>, conn: ConnId) -> Self::Conn;

    /// An outbound connection opened with [`Io::connect`] is established.
    fn on_connect(&mut self, _io: &mut Io<Self::Conn>, _conn: ConnId, _state: &mut Self::Conn) {}

    /// Bytes arrived. Returns how many were consumed. After a call that
    /// consumed some, the rest is offered again at once (a handler may take
    /// one request per call); after one that consumed none, it is handed
    /// back with what arrives next. A call is offered at most
    /// [`ConfigBuilder::read_buffer`](super::ConfigBuilder::read_buffer)
    /// new bytes (64 KiB by default) on every backend; after one that
    /// consumed none of its slice, the next has that slice and up to as
    /// many bytes more. While reading is paused (the output is
    /// over [`ConfigBuilder::max_output`](super::ConfigBuilder::max_output),
    /// or [`Io::pause_reading`]) nothing is offered; the rest is offered
    /// when reading resumes, without waiting for new bytes. After
    /// [`Io::close`] nothing more is offered. More than
    /// [`ConfigBuilder::max_input`](super::ConfigBuilder::max_input) bytes
    /// left unconsumed close the connection with
    /// [`CloseReason::InputLimit`].
    fn on_data(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, state: &mut Self::Conn, data: &[u8]) -> usize;

    /// The peer's input ended (it shut its write side down, or closed):
    /// called once, after every byte before it was offered to
    /// [`on_data`](Handler::on_data), and not while reading is paused (it
    /// waits for the resume, as input does). Input the handler left
    /// unconsumed stays in place, never offered again.
    ///
    /// By default our side is shut down once the output queued is sent
    /// ([`Io::shutdown_write`]), and the connection closes with
    /// [`CloseReason::PeerClosed`]: a request/response protocol answers
    /// what it was asked, then closes. A handler that still has to answer
    /// (it reads to the end before it replies, or relays the other way)
    /// writes first, or calls `shutdown_write` later.
    fn on_read_closed(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, _state: &mut Self::Conn) {
        io.shutdown_write(conn);
    }

    /// The output fell to the mark asked for: empty after
    /// [`Io::notify_drained`], or at most the bytes given to
    /// [`Io::notify_below`]. Once per call of either.
    fn on_drained(&mut self, _io: &mut Io<Self::Conn>, _conn: ConnId, _state: &mut Self::Conn) {}

    /// The connection is closed and its id is dead; its state comes back.
    fn on_close(&mut self, _io: &mut Io<Self::Conn>, _conn: ConnId, _state: Self::Conn, _reason: &CloseReason) {}

    /// The connection's deadline, set with [`Io::set_deadline`], has come
    /// (it is cleared now; set it again to be called again). By default
    /// the connection closes as idle ([`Io::close_idle`]), as an idle
    /// timeout would.
    fn on_deadline(&mut self, io: &mut Io<Self::Conn>, conn: ConnId, _state: &mut Self::Conn) {
        io.close_idle(conn);
    }

    /// A message sent with a [`Sender`](super::Sender) of this loop's
    /// (see [`Runtime::senders`](super::Runtime::senders)) arrived.
    /// Messages from one sender arrive in the order sent; they are
    /// delivered between I/O events, never during another callback.
    fn on_message(&mut self, _io: &mut Io<Self::Conn>, _msg: Self::Message) {}

    /// Loop `loop_index`'s inbox has room again, as asked with
    /// [`Io::when_room`](super::Io::when_room): a producer that paused its
    /// input after a refused [`Sender::try_send`](super::Sender::try_send)
    /// resumes here.
    fn on_room(&mut self, _io: &mut Io<Self::Conn>, _loop_index: usize) {}

    /// A timer set with [`Io::set_timer`] is due; `token` is what was set.
    fn on_timer(&mut self, _io: &mut Io<Self::Conn>, _timer: TimerId, _token: u64) {}

    /// An accepted connection was closed at once because the backend
    /// cannot watch it (select: descriptor number >= FD_SETSIZE).
    fn on_refused(&mut self, _error: &Error) {}
}
