//! Echo server: `cargo run --release --example echo -- [ADDR] [LOOPS]`
//! (default 127.0.0.1:7878, 1 loop). `IOMUX_BACKEND` picks the mechanism
//! (select, poll, epoll, epoll-et, uring, uring-sqpoll); Ctrl-C stops it
//! gracefully: accepting stops, pending output is flushed, then it exits.
use iomux::runtime::{Config, ConnId, Handler, Io, Runtime};
use iomux::Backend;

struct Echo;

impl Handler for Echo {
    type Conn = (); // no per-connection state
    type Message = ();

    fn on_accept(&mut self, _io: &mut Io<()>, _conn: ConnId) {}

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
        let _ = io.write(conn, data);
        data.len() // everything consumed
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7878".into()).parse()?;
    let loops = args.next().map_or(Ok(1), |n| n.parse())?;
    let backend = Backend::from_env()?;
    let runtime = Runtime::new(Config::builder().backend(backend).build()?, loops)?.bind(addr)?;
    let local = runtime.local_addr().unwrap_or(addr);
    let runtime = runtime.stop_on_signals().on_ready(move || println!("echo: listening on {local} ({backend})"));
    let finished = runtime.run(|_| Echo)?;
    println!("echo: stopped after {} connections", finished.stats.accepted);
    Ok(())
}
