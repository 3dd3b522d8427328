//! `iomux serve --proto http`: the HTTP state machine of `iomux-http` on
//! the runtime's public API, as any user of the library would write it.
//!
//! Each connection's header and idle timeouts are its runtime deadline
//! ([`Io::set_deadline`]): moved later after every response, which costs
//! the runtime no heap work, and earlier when a request starts. Responses
//! are serialized straight into the connection's output
//! ([`Io::write_with`]).

use iomux::runtime::{ConnId, Handler, Io, TimerId};
use iomux_http::{Http, Limits, Session};
use std::time::{Duration, SystemTime};

/// The token of the loop timer that refreshes the cached `Date`.
const DATE_TIMER: u64 = u64::MAX;

/// The limits and timeouts, each a `serve` flag.
#[derive(Clone, Copy, Debug)]
pub struct HttpSettings {
    pub limits: Limits,
    /// From the first byte of a request (or from accept) to the end of its
    /// head; also the longest pause while a body arrives.
    pub header_timeout: Duration,
    /// Between a response and the next request's first byte.
    pub idle_timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Fresh from accept: no request yet.
    Fresh,
    /// Waiting for the next request.
    Idle,
    /// Part of a request head has arrived.
    Head,
    /// The head is complete; the body is arriving.
    Body,
}

pub struct HttpConn {
    session: Session,
    phase: Phase,
}

pub struct HttpServer {
    http: Http,
    settings: HttpSettings,
    /// Requests answered (every final response, errors included).
    pub responses: u64,
    /// Connections closed by the header or idle timeout.
    pub timeouts: u64,
}

impl HttpServer {
    pub fn new(settings: HttpSettings) -> HttpServer {
        HttpServer { http: Http::new(settings.limits), settings, responses: 0, timeouts: 0 }
    }

    fn refresh_date(&mut self, io: &mut Io<HttpConn>) {
        let now = SystemTime::now();
        self.http.set_date(now);
        // Next at the start of the next second, so the header turns with the clock.
        let into_second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(Duration::ZERO, |d| Duration::from_nanos(u64::from(d.subsec_nanos())));
        io.set_timer(io.now() + (Duration::from_secs(1) - into_second), DATE_TIMER);
    }
}

impl Handler for HttpServer {
    type Conn = HttpConn;
    type Message = ();

    fn on_start(&mut self, io: &mut Io<HttpConn>) {
        self.refresh_date(io);
    }

    fn on_accept(&mut self, io: &mut Io<HttpConn>, conn: ConnId) -> HttpConn {
        // As nginx: the first request's head must come within the header timeout.
        let _ = io.set_deadline(conn, io.now() + self.settings.header_timeout);
        HttpConn { session: Session::default(), phase: Phase::Fresh }
    }

    fn on_data(&mut self, io: &mut Io<HttpConn>, conn: ConnId, st: &mut HttpConn, data: &[u8]) -> usize {
        // Every response of the batch in one buffer: one send for a pipeline.
        let http = &mut self.http;
        let Some(fed) = io.write_with(conn, |out| http.feed(&mut st.session, data, out)) else {
            return data.len(); // closing: nothing more is answered
        };
        self.responses += u64::from(fed.responses);
        if fed.close {
            // Closing clears the deadline: no timeout fires (and is
            // counted) while it lingers.
            io.close(conn);
            return data.len();
        }
        let now = io.now();
        let pending = fed.consumed < data.len();
        let phase = match (pending, st.session.in_body()) {
            (false, _) if fed.responses == 0 && st.phase == Phase::Fresh => Phase::Fresh,
            (false, _) => Phase::Idle,
            (true, false) => Phase::Head,
            (true, true) => Phase::Body,
        };
        let deadline = match phase {
            // Empty lines alone do not extend an idle connection's time.
            Phase::Idle if fed.responses > 0 => Some(now + self.settings.idle_timeout),
            Phase::Idle | Phase::Fresh => None,
            // A head's time runs from its first byte, however slowly it comes.
            Phase::Head if st.phase == Phase::Idle || fed.responses > 0 => Some(now + self.settings.header_timeout),
            Phase::Head => None,
            // A body may take long, but not pause for longer than the timeout.
            Phase::Body => Some(now + self.settings.header_timeout),
        };
        if let Some(at) = deadline {
            let _ = io.set_deadline(conn, at);
        }
        st.phase = phase;
        fed.consumed
    }

    fn on_timer(&mut self, io: &mut Io<HttpConn>, _timer: TimerId, token: u64) {
        if token == DATE_TIMER {
            self.refresh_date(io);
        }
    }

    fn on_deadline(&mut self, io: &mut Io<HttpConn>, conn: ConnId, st: &mut HttpConn) {
        // A request under way gets a 408 (nginx closes silently; the status
        // tells a slow client why); an idle connection just closes.
        if matches!(st.phase, Phase::Head | Phase::Body) {
            let http = &mut self.http;
            if io.write_with(conn, |out| http.timed_out(&mut st.session, out)).is_some() {
                self.responses += 1;
            }
        }
        self.timeouts += 1;
        if matches!(st.phase, Phase::Head | Phase::Body) {
            io.close(conn);
        } else {
            io.close_idle(conn); // between requests: an idle keep-alive connection
        }
    }
}
