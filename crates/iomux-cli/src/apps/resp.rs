//! `iomux serve --proto resp`: the RESP2 key-value store of `iomux-resp`
//! on the runtime's public API, as any user of the library would write it.
//!
//! One keyspace for every loop, behind a lock: a command holds it only
//! while it runs (microseconds), so the loops rarely meet there, and a
//! SET on one connection is seen by a GET on any other, as in redis.
//! The other way, a store per loop with each command routed to its
//! owner by a message, costs a round trip of messages (5.7-5.9 us and 4
//! syscalls measured by `cargo run --release -p iomux --example
//! state_sharing`) against 12-14 ns for the lock: more than a command.
//!
//! A large value (16 KiB or more) is kept shared: a GET queues a reference
//! to it behind the reply's head ([`Io::write_bytes`]), so a pipeline of
//! GETs of one large value costs no copy and no memory per reply, and
//! goes out in gathered sends.
//!
//! Pub/sub spans every loop (apps/pubsub.rs).

use super::pubsub::{Delivery, Hub, RespConn};
use iomux::runtime::{CloseReason, ConnId, Handler, Io};
use iomux_resp::{Limits, Resp, Store, Subscriptions};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Replies are serialized until the output passes this many bytes; then
/// the loop offers the rest of the pipeline again (at once, or once the
/// output drains), so a pipeline of large values stays within the
/// connection's output bound plus one reply.
const REPLY_BUDGET: usize = 64 << 10;

/// The keys, and the clock their expiries count on (one for all loops).
pub struct Keyspace {
    store: Mutex<Store>,
    start: Instant,
}

impl Keyspace {
    pub fn new() -> Arc<Keyspace> {
        Arc::new(Keyspace { store: Mutex::new(Store::new()), start: Instant::now() })
    }
}

pub struct RespServer {
    resp: Resp,
    keys: Arc<Keyspace>,
    pub hub: Hub,
    /// Replies sent (errors included).
    pub replies: u64,
    /// Error replies sent.
    pub errors: u64,
    /// The loop's clock at the last call, and it in the keyspace's
    /// milliseconds: one conversion per turn, not per call.
    clock: Option<(Instant, u64)>,
    /// The subscriptions of a connection that has none, lent to each of
    /// its feeds: kept, not made and dropped per call.
    unsubscribed: Subscriptions,
}

impl RespServer {
    pub fn new(keys: Arc<Keyspace>, limits: Limits, hub: Hub) -> RespServer {
        RespServer {
            resp: Resp::new(limits).share_values(),
            keys,
            hub,
            replies: 0,
            errors: 0,
            clock: None,
            unsubscribed: Subscriptions::default(),
        }
    }
}

impl Handler for RespServer {
    type Conn = RespConn;
    type Message = Delivery;

    fn on_accept(&mut self, _io: &mut Io<RespConn>, _conn: ConnId) -> RespConn {
        None
    }

    fn on_data(&mut self, io: &mut Io<RespConn>, conn: ConnId, sub: &mut RespConn, data: &[u8]) -> usize {
        // The loop's clock, read once per turn: no clock read per request.
        let now = io.now();
        let now_ms = match self.clock {
            Some((at, ms)) if at == now => ms,
            _ => {
                let ms = now.saturating_duration_since(self.keys.start).as_millis() as u64;
                self.clock = Some((now, ms));
                ms
            }
        };
        // A loop that panicked holding the lock left whole commands behind
        // (each command's change is one map operation): carry on.
        let mut store = self.keys.store.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (resp, hub, none) = (&mut self.resp, &mut self.hub, &mut self.unsubscribed);
        // A connection that never subscribed keeps no subscriptions.
        let subs = sub.as_mut().map_or(none, |s| &mut s.subs);
        let fed = io.write_with(conn, |out| {
            resp.feed_pubsub(&mut store, now_ms, data, out, REPLY_BUDGET, subs, &mut hub.broker(conn))
        });
        drop(store);
        if self.unsubscribed.count() > 0 {
            *sub = Some(super::pubsub::Subscriber::new(std::mem::take(&mut self.unsubscribed)));
        }
        self.hub.after_feed(io, conn);
        let Some(fed) = fed else {
            return data.len(); // closing: nothing more is answered
        };
        self.replies += u64::from(fed.replies);
        self.errors += u64::from(fed.errors);
        if let Some(tail) = fed.shared {
            // The feed stopped after a shared value's head: the value
            // follows it. The loop offers the rest of the input at once.
            let _ = io.write_bytes(conn, tail);
        }
        if fed.close {
            io.close(conn);
            return data.len();
        }
        fed.consumed
    }

    fn on_message(&mut self, io: &mut Io<RespConn>, delivery: Delivery) {
        self.hub.delivered(io, delivery);
    }

    fn on_room(&mut self, io: &mut Io<RespConn>, loop_index: usize) {
        self.hub.room(io, loop_index);
    }

    fn on_drained(&mut self, io: &mut Io<RespConn>, conn: ConnId, _sub: &mut RespConn) {
        self.hub.drained(io, conn);
    }

    fn on_timer(&mut self, io: &mut Io<RespConn>, _timer: iomux::runtime::TimerId, _token: u64) {
        self.hub.check_stalls(io);
    }

    fn on_close(&mut self, io: &mut Io<RespConn>, conn: ConnId, sub: RespConn, _reason: &CloseReason) {
        if let Some(sub) = sub {
            self.hub.closed(conn, &sub.subs);
        }
        self.hub.forget(conn);
        self.hub.drained(io, conn); // it holds nobody back any more
    }
}
