//! What sharing state across loops costs, the two ways the crate docs
//! describe: `cargo run --release --example state_sharing [ROUNDS]`.
//!
//! - **a lock**: two threads each do GET-and-SET pairs on one
//!   `Mutex<HashMap>` (contended), then one thread alone (uncontended);
//! - **routing by message**: a request to the loop that owns the key and
//!   its answer back, as two messages between two loops (each a queue
//!   push and, when the loop sleeps, an eventfd wake).
//!
//! `IOMUX_BACKEND` picks the loops' mechanism.
use iomux::runtime::{Config, ConnId, Handler, Io, Runtime, Sender};
use iomux::Backend;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Per-operation cost of `threads` threads each doing `rounds` GET+SET
/// pairs on one locked map, in nanoseconds.
fn locked_map(threads: usize, rounds: u64) -> f64 {
    let map = Arc::new(Mutex::new((0..1000u64).map(|k| (k, k)).collect::<HashMap<_, _>>()));
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads as u64 {
            let map = &map;
            s.spawn(move || {
                for i in 0..rounds {
                    let key = (i * 7 + t) % 1000;
                    // Poisoned only by a panic, which this example has none of.
                    let value = map.lock().map(|m| m.get(&key).copied()).unwrap_or(None);
                    map.lock().map(|mut m| m.insert(key, black_box(value.unwrap_or(0) + 1))).ok();
                }
            });
        }
    });
    started.elapsed().as_nanos() as f64 / (threads as u64 * rounds * 2) as f64
}

/// Two loops bounce a counter: loop 0 asks, loop 1 answers, `rounds` times.
struct Bouncer {
    me: usize,
    loops: Vec<Sender<u64>>,
    rounds: u64,
    started: Option<Instant>,
    elapsed_ns: f64,
}

impl Handler for Bouncer {
    type Conn = ();
    type Message = u64;

    fn on_start(&mut self, _io: &mut Io<()>) {
        if self.me == 0 {
            self.started = Some(Instant::now());
            let _ = self.loops[1].send(0);
        }
    }

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        data.len()
    }

    fn on_message(&mut self, io: &mut Io<()>, n: u64) {
        if self.me == 1 {
            if n == u64::MAX {
                io.stop();
            } else {
                let _ = self.loops[0].send(n + 1);
            }
        } else if n < self.rounds {
            let _ = self.loops[1].send(n);
        } else {
            self.elapsed_ns = self.started.map_or(0.0, |s| s.elapsed().as_nanos() as f64);
            io.stop();
            let _ = self.loops[1].send(u64::MAX); // stops loop 1 too
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: u64 = std::env::args().nth(1).map_or(Ok(200_000), |n| n.parse())?;
    let backend = Backend::from_env()?;
    println!("lock, 1 thread:   {:.1} ns per GET or SET", locked_map(1, rounds * 10));
    println!("lock, 2 threads:  {:.1} ns per GET or SET", locked_map(2, rounds * 10));
    let runtime = Runtime::new(Config::builder().backend(backend).build()?, 2)?.bind("127.0.0.1:0".parse()?)?;
    let loops = runtime.senders()?;
    let finished = runtime.run(|me| Bouncer { me, loops: loops.clone(), rounds, started: None, elapsed_ns: 0.0 })?;
    let per_trip = finished.handlers[0].elapsed_ns / rounds as f64;
    let syscalls = finished.stats.syscalls.total() as f64 / rounds as f64;
    println!("message, {backend}: {:.0} ns per round trip between loops ({syscalls:.2} syscalls)", per_trip);
    Ok(())
}
