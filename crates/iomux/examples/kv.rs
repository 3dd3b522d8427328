//! A line-based key-value server: `cargo run --example kv -- [ADDR] [IDLE_SECS]`
//! (default 127.0.0.1:7879, 30 s). One loop, so one store.
//!
//! Commands, one per line: `SET key value`, `GET key`, `DEL key`, `QUIT`.
//! Answers: `OK`, `VALUE value`, `NOT_FOUND`, `ERR why`, `BYE`.
//! A connection idle for IDLE_SECS is told `IDLE` and closed.
//!
//! What it shows: partial consumption (only whole lines are consumed; the
//! rest comes back with the next bytes), per-connection state (a session
//! with its own idle timer, dropped when the connection closes) and
//! cancellable timers.
use iomux::runtime::{CloseReason, Config, ConnId, Handler, Io, Runtime, TimerId};
use iomux::Backend;
use std::collections::HashMap;
use std::time::Duration;

/// Lines longer than this are refused, and the connection closed.
const MAX_LINE: usize = 64 << 10;

struct Kv {
    store: HashMap<Vec<u8>, Vec<u8>>,
    idle: Duration,
}

/// One connection's state.
struct Session {
    idle_timer: TimerId,
    commands: u64,
}

impl Kv {
    fn answer(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        let mut words = text.splitn(3, |&b| b == b' ');
        let reply = match (words.next(), words.next(), words.next()) {
            (Some(b"SET"), Some(key), Some(value)) => {
                self.store.insert(key.to_vec(), value.to_vec());
                b"OK".to_vec()
            }
            (Some(b"GET"), Some(key), None) => match self.store.get(key) {
                Some(v) => [b"VALUE ".as_slice(), v].concat(),
                None => b"NOT_FOUND".to_vec(),
            },
            (Some(b"DEL"), Some(key), None) => match self.store.remove(key) {
                Some(_) => b"OK".to_vec(),
                None => b"NOT_FOUND".to_vec(),
            },
            (Some(b"QUIT"), None, None) => return None,
            _ => b"ERR unknown command (SET key value | GET key | DEL key | QUIT)".to_vec(),
        };
        Some(reply)
    }
}

impl Handler for Kv {
    type Conn = Session;
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<Session>, conn: ConnId) -> Session {
        let idle_timer = io.set_timer(io.now() + self.idle, conn.as_u64());
        Session { idle_timer, commands: 0 }
    }

    fn on_data(&mut self, io: &mut Io<Session>, conn: ConnId, session: &mut Session, data: &[u8]) -> usize {
        // Any input resets the idle clock.
        io.cancel_timer(session.idle_timer);
        session.idle_timer = io.set_timer(io.now() + self.idle, conn.as_u64());
        let mut consumed = 0;
        while let Some(end) = data[consumed..].iter().position(|&b| b == b'\n') {
            let line = &data[consumed..consumed + end];
            consumed += end + 1;
            session.commands += 1;
            match self.answer(line) {
                Some(mut reply) => {
                    reply.push(b'\n');
                    let _ = io.write(conn, &reply);
                }
                None => {
                    let _ = io.write(conn, b"BYE\n");
                    io.close(conn);
                    return data.len(); // nothing after QUIT is read
                }
            }
        }
        if data.len() - consumed > MAX_LINE {
            let _ = io.write(conn, b"ERR line too long\n");
            io.close(conn);
            return data.len();
        }
        consumed // an incomplete line comes back with the next bytes
    }

    fn on_timer(&mut self, io: &mut Io<Session>, _timer: TimerId, token: u64) {
        // The token is the connection; a closed one ignores both calls.
        let conn = ConnId::from_u64(token);
        let _ = io.write(conn, b"IDLE\n");
        io.close(conn);
    }

    fn on_close(&mut self, io: &mut Io<Session>, _conn: ConnId, session: Session, reason: &CloseReason) {
        io.cancel_timer(session.idle_timer);
        if !reason.is_clean() {
            eprintln!("kv: a connection ended after {} commands: {reason:?}", session.commands);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:7879".into()).parse()?;
    let idle = Duration::from_secs_f64(args.next().map_or(Ok(30.0), |s| s.parse())?);
    let config = Config::builder().backend(Backend::from_env()?).build()?;
    let runtime = Runtime::new(config, 1)?.bind(addr)?.stop_on_signals();
    let local = runtime.local_addr().unwrap_or(addr);
    let runtime = runtime.on_ready(move || println!("kv: listening on {local}"));
    runtime.run(|_| Kv { store: HashMap::new(), idle })?;
    Ok(())
}
