//! The protocols `iomux serve` speaks, each written once for every backend.

use iomux::runtime::{ConnId, Handler, Io};
use iomux::Error;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Proto {
    /// Returns every byte it receives.
    Echo,
    /// Reads and discards.
    Sink,
}

pub struct Server {
    proto: Proto,
    refusals_reported: u32,
    /// Called when the loop has set itself up and starts serving.
    started: Arc<dyn Fn() + Send + Sync>,
}

impl Server {
    pub fn new(proto: Proto, started: Arc<dyn Fn() + Send + Sync>) -> Server {
        Server { proto, refusals_reported: 0, started }
    }
}

impl Handler for Server {
    fn on_start(&mut self, _io: &mut dyn Io) {
        (self.started)();
    }

    fn on_data(&mut self, io: &mut dyn Io, conn: ConnId, data: &[u8]) -> usize {
        if self.proto == Proto::Echo {
            io.write(conn, data);
        }
        data.len()
    }

    fn on_refused(&mut self, error: &Error) {
        // Say why once (and how often at the end, in the stats), not per fd.
        if self.refusals_reported == 0 {
            eprintln!("iomux serve: refusing connections: {error}");
        }
        self.refusals_reported += 1;
    }
}
