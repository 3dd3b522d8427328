//! Chat server: `cargo run --release --example chat -- [ADDR] [LOOPS]`
//! (default 127.0.0.1:7879, 2 loops); try it with several `nc 127.0.0.1 7879`.
//! Every line a client sends reaches every client, on whichever loop
//! the kernel placed it: each loop owns its own connections (no lock) and
//! hands a line to the others as a message, through a
//! [`Sender`](iomux::runtime::Sender) per loop.
//! `IOMUX_BACKEND` picks the mechanism; Ctrl-C stops it.
use iomux::runtime::{CloseReason, Config, ConnId, Handler, Io, Runtime, Sender};
use iomux::Backend;
use std::sync::Arc;

/// Lines longer than this are cut: a client cannot make every other
/// client's output grow without bound in one line.
const MAX_LINE: usize = 1024;

/// One loop's share of the room: the clients it holds and a way to reach
/// every loop (itself included).
pub struct Room {
    loops: Vec<Sender<Arc<[u8]>>>,
    members: Vec<ConnId>,
}

impl Room {
    /// Loop `me`'s room; `loops` reach every loop, in loop order.
    pub fn new(loops: Vec<Sender<Arc<[u8]>>>) -> Room {
        Room { loops, members: Vec::new() }
    }
}

impl Handler for Room {
    type Conn = ();
    /// A line to show: shared, not copied, between loops.
    type Message = Arc<[u8]>;

    fn on_accept(&mut self, _io: &mut Io<()>, conn: ConnId) {
        self.members.push(conn);
    }

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let (line, consumed) = match data.iter().position(|&b| b == b'\n') {
            Some(end) if end < MAX_LINE => (&data[..=end], end + 1),
            // No end of line yet: wait for more, up to the limit.
            None if data.len() < MAX_LINE => return 0,
            _ => (&data[..MAX_LINE], MAX_LINE),
        };
        let from = io.peer_addr(conn).map_or_else(|_| "?".into(), |a| a.to_string());
        let mut shown = format!("{from}: ").into_bytes();
        shown.extend_from_slice(line);
        if shown.last() != Some(&b'\n') {
            shown.push(b'\n');
        }
        let shown: Arc<[u8]> = shown.into();
        for room in &self.loops {
            // A loop that has ended (the server is stopping) misses it.
            let _ = room.send(shown.clone());
        }
        consumed
    }

    fn on_message(&mut self, io: &mut Io<()>, line: Arc<[u8]>) {
        for &member in &self.members {
            // A member whose output is full misses lines rather than
            // holding the room back (false: it is closing anyway).
            if io.buffered(member) < 64 * 1024 {
                let _ = io.write(member, &line);
            }
        }
    }

    fn on_close(&mut self, _io: &mut Io<()>, conn: ConnId, _: (), _reason: &CloseReason) {
        self.members.retain(|&m| m != conn);
    }
}

#[allow(dead_code)] // tests/chat.rs includes this file for `Room` alone
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7879".into()).parse()?;
    let loops = args.next().map_or(Ok(2), |n| n.parse())?;
    let backend = Backend::from_env()?;
    let runtime = Runtime::new(Config::builder().backend(backend).build()?, loops)?.bind(addr)?;
    let senders = runtime.senders()?;
    let local = runtime.local_addr().unwrap_or(addr);
    let runtime = runtime.stop_on_signals().on_ready(move || println!("chat: listening on {local} ({backend})"));
    let finished = runtime.run(|_| Room::new(senders.clone()))?;
    println!("chat: stopped after {} clients and {} lines shown", finished.stats.accepted, finished.stats.messages);
    Ok(())
}
