//! The protocols `iomux serve` speaks, each written once for every backend.

pub mod http;
pub mod proxy;
pub mod pubsub;
pub mod resp;
#[cfg(feature = "slowdown")]
mod slowdown;

use iomux::runtime::{ConnId, Handler, Io};
use iomux::Error;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Proto {
    /// Returns every byte it receives.
    Echo,
    /// Reads and discards.
    Sink,
    /// HTTP/1.1: GET /plaintext, GET /json, POST /echo (see --http-* flags).
    Http,
    /// RESP2, redis's protocol: a key-value store (PING, ECHO, GET, SET,
    /// DEL, INCR, DECR, EXISTS, EXPIRE, TTL, DBSIZE, FLUSHALL, CONFIG GET,
    /// COMMAND, QUIT), one keyspace for all threads.
    Resp,
    /// A TCP proxy to --upstream (haproxy's tcp mode): each connection
    /// relayed to its own upstream connection, each direction half-closing
    /// and bounded on its own.
    Proxy,
}

impl Proto {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Echo => "echo",
            Proto::Sink => "sink",
            Proto::Http => "http",
            Proto::Resp => "resp",
            Proto::Proxy => "proxy",
        }
    }
}

/// Echo and sink.
pub struct Server {
    proto: Proto,
    refusals_reported: u32,
    /// A connection with no input for this long closes (as idle).
    idle_timeout: Option<Duration>,
}

impl Server {
    pub fn new(proto: Proto, idle_timeout: Option<Duration>) -> Server {
        Server { proto, refusals_reported: 0, idle_timeout }
    }

    fn idle_from_now(&self, io: &mut Io<()>, conn: ConnId) {
        if let Some(timeout) = self.idle_timeout {
            // Moving a deadline later costs no timer operation: no
            // per-read work for a busy connection.
            let _ = io.set_deadline(conn, io.now() + timeout);
        }
    }
}

impl Handler for Server {
    type Conn = ();
    type Message = ();

    fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
        self.idle_from_now(io, conn);
    }

    fn on_deadline(&mut self, io: &mut Io<()>, conn: ConnId, _state: &mut ()) {
        if io.buffered(conn) > 0 {
            // Output still queued: a client held back by our output
            // bound (not read meanwhile) is busy, not idle.
            self.idle_from_now(io, conn);
        } else {
            io.close_idle(conn);
        }
    }

    fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _state: &mut (), data: &[u8]) -> usize {
        self.idle_from_now(io, conn);
        if self.proto == Proto::Echo {
            #[cfg(feature = "slowdown")]
            slowdown::spin();
            let _ = io.write(conn, data);
        }
        data.len()
    }

    fn on_refused(&mut self, error: &Error) {
        // Say why once (and how often at the end, in the stats), not per fd.
        if self.refusals_reported == 0 {
            eprintln!("iomux serve: refusing connections: {}", crate::chain(error));
        }
        self.refusals_reported += 1;
    }
}
