//! Messages between loops, on every backend: a bounded inbox
//! (`ConfigBuilder::inbox_capacity`) that `Sender::try_send` keeps to,
//! room notices (`Io::when_room`, `Handler::on_room`) that let a producer
//! wait instead of polling, broadcast to every loop, and the small-buffer
//! copy of `write_bytes` (`ConfigBuilder::share_min`).

#[macro_use]
mod runtime_support;

use iomux::runtime::{Bytes, Config, ConnId, Handler, Io, Runtime, Sender, TrySendError};
use iomux::Backend;
use runtime_support::*;
use std::io::Write;

on_every_backend! {
    a_producer_keeps_to_the_inbox_and_waits_for_room,
    a_consumer_that_holds_its_messages_holds_its_producer_back,
    broadcast_reaches_every_loop,
    small_shared_buffers_are_copied_below_share_min,
}

const CAPACITY: usize = 8;
const MESSAGES: u64 = 5_000;

/// Loop 0 produces MESSAGES numbers for loop 1 with `try_send` as fast as
/// it may: refused, it asks for room and goes on from `on_room`. Loop 1
/// takes them in order. Both stop when done.
enum Role {
    Producer {
        to: Sender<u64>,
        next: u64,
        refused: u64,
        rooms: u64,
    },
    /// With `hold_every`, it holds its messages after every that many
    /// and releases them 2 ms later.
    Consumer {
        got: Vec<u64>,
        hold_every: Option<usize>,
        holds: u64,
        held: bool,
    },
}

impl Role {
    fn produce(&mut self, io: &mut Io<()>) {
        let Role::Producer { to, next, refused, .. } = self else { return };
        while *next < MESSAGES {
            match to.try_send(*next) {
                Ok(()) => *next += 1,
                Err(TrySendError::Full(n)) => {
                    assert_eq!(n, *next, "try_send hands the refused message back");
                    *refused += 1;
                    return io.when_room(to);
                }
                Err(TrySendError::Ended(_)) => panic!("the consumer ended early"),
            }
        }
        io.stop();
    }
}

impl Handler for Role {
    type Conn = ();
    type Message = u64;
    fn on_start(&mut self, io: &mut Io<()>) {
        self.produce(io);
    }
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }
    fn on_message(&mut self, io: &mut Io<()>, n: u64) {
        if let Role::Consumer { got, hold_every, holds, held } = self {
            assert!(!*held, "message {n} handed over while the messages were held");
            got.push(n);
            if got.len() as u64 == MESSAGES {
                io.stop();
            } else if hold_every.is_some_and(|every| got.len() % every == 0) {
                io.hold_messages();
                (*holds, *held) = (*holds + 1, true);
                io.set_timer(io.now() + std::time::Duration::from_millis(2), 0);
            }
        }
    }
    fn on_timer(&mut self, io: &mut Io<()>, _timer: iomux::runtime::TimerId, _token: u64) {
        if let Role::Consumer { held, .. } = self {
            *held = false;
        }
        io.release_messages();
    }
    fn on_room(&mut self, io: &mut Io<()>, loop_index: usize) {
        assert_eq!(loop_index, 1, "room in the consumer's inbox");
        if let Role::Producer { rooms, .. } = self {
            *rooms += 1;
        }
        self.produce(io);
    }
}

fn a_producer_keeps_to_the_inbox_and_waits_for_room(backend: Backend) {
    producer_and_consumer(backend, None);
}

/// The consumer holds its messages after every 500 for 2 ms: they wait in
/// its inbox, which fills, so the producer waits for room; every message
/// still arrives once, in order.
fn a_consumer_that_holds_its_messages_holds_its_producer_back(backend: Backend) {
    let holds = producer_and_consumer(backend, Some(500));
    assert_eq!(holds, MESSAGES / 500 - 1, "{backend}");
}

/// Runs the producer and the consumer; returns the consumer's holds.
fn producer_and_consumer(backend: Backend, hold_every: Option<usize>) -> u64 {
    let config = Config::builder().backend(backend).inbox_capacity(Some(CAPACITY)).build().unwrap();
    let runtime = Runtime::new(config, 2).unwrap().bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let senders = runtime.senders::<u64>().unwrap();
    let server = start(runtime, move |i| match i {
        0 => Role::Producer { to: senders[1].clone(), next: 0, refused: 0, rooms: 0 },
        _ => Role::Consumer { got: Vec::new(), hold_every, holds: 0, held: false },
    });
    let finished = server.finish(); // both loops stop by themselves
    let Role::Consumer { got, holds, .. } = &finished.handlers[1] else { panic!("loop 1 consumes") };
    assert!(got.iter().copied().eq(0..MESSAGES), "{backend}: every message, once, in order");
    let Role::Producer { refused, rooms, .. } = &finished.handlers[0] else { panic!("loop 0 produces") };
    // The consumer's loop sleeps between wakes: a producer outruns it.
    assert!(*refused > 0, "{backend}: the inbox never filled");
    assert_eq!(rooms, refused, "{backend}: one room notice per refusal");
    let consumer = &finished.loops[1];
    assert_eq!(consumer.inbox_refused, *refused, "{backend}");
    assert!(consumer.inbox_peak as usize <= CAPACITY, "{backend}: {} queued at the peak", consumer.inbox_peak);
    *holds
}

/// Counts the messages it gets and stops at the first.
struct Once(Vec<u32>);

impl Handler for Once {
    type Conn = ();
    type Message = u32;
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }
    fn on_message(&mut self, io: &mut Io<()>, n: u32) {
        self.0.push(n);
        io.stop();
    }
}

fn broadcast_reaches_every_loop(backend: Backend) {
    let config = Config::builder().backend(backend).build().unwrap();
    let runtime = Runtime::new(config, 3).unwrap().bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let senders = runtime.senders::<u32>().unwrap();
    let server = start(runtime, |_| Once(Vec::new()));
    assert_eq!(Sender::broadcast(&senders, 7), 3, "{backend}");
    let finished = server.finish();
    let got: Vec<&[u32]> = finished.handlers.iter().map(|h| &h.0[..]).collect();
    assert_eq!(got, [[7], [7], [7]], "{backend}");
    // Every loop has ended: a broadcast reaches nobody, and says so.
    assert_eq!(Sender::broadcast(&senders, 8), 0, "{backend}");
}

/// Answers each byte with a 16-byte head and one shared 512-byte body.
struct SharedBody(Bytes);

impl Handler for SharedBody {
    type Conn = ();
    type Message = ();
    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}
    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        for _ in data {
            let _ = io.write(conn, &[b'h'; 16]) && io.write_bytes(conn, self.0.clone());
        }
        data.len()
    }
}

/// 512-byte bodies are copied with the default share_min (1 KiB): no
/// gathered send; with share_min 256 they are shared, sent by reference
/// beside the head in gathered sends. The bytes are the same either way.
fn small_shared_buffers_are_copied_below_share_min(backend: Backend) {
    let body = Bytes::from(pattern(5, 512));
    let want: Vec<u8> = (0..20).flat_map(|_| [&[b'h'; 16][..], &body[..]].concat()).collect();
    for (share_min, shared) in [(None, false), (Some(256), true)] {
        let mut config = Config::builder().backend(backend);
        if let Some(bytes) = share_min {
            config = config.share_min(bytes);
        }
        let body = body.clone();
        let server = serve(config.build().unwrap(), 1, move |_| SharedBody(body.clone()));
        let mut c = connect(server.addr);
        for _ in 0..20 {
            c.write_all(b"x").unwrap();
            let got = read_exact(&mut c, 16 + 512);
            assert_bytes(&got, &want[..16 + 512], "one answer");
        }
        drop(c);
        let gathered = server.stop().stats.gathered_sends;
        assert_eq!(gathered > 0, shared, "{backend}, share_min {share_min:?}: {gathered} gathered sends");
    }
}
