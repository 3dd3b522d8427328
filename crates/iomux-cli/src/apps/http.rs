//! `iomux serve --proto http`: the HTTP state machine of `iomux-http` on
//! the runtime's public API, as any user of the library would write it.
//!
//! Each connection carries one deadline and at most one runtime timer.
//! The timer is re-armed lazily: when it fires early (the deadline moved
//! later since), it is set again for the rest; it is only cancelled and
//! set anew when the deadline moves earlier (an idle connection starting
//! a request). So a keep-alive connection answering request after request
//! costs no timer operation per request.

use iomux::runtime::{CloseReason, ConnId, Handler, Io, TimerId};
use iomux_http::{Http, Limits, Session};
use std::time::{Duration, Instant, SystemTime};

/// The timer that refreshes the cached `Date` (connection timers carry
/// their connection's id, which is never this).
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
    deadline: Instant,
    /// The armed timer and when it fires.
    timer: Option<(TimerId, Instant)>,
}

pub struct HttpServer {
    http: Http,
    settings: HttpSettings,
    out: Vec<u8>,
    /// Requests answered (every final response, errors included).
    pub responses: u64,
    /// Connections closed by the header or idle timeout.
    pub timeouts: u64,
}

impl HttpServer {
    pub fn new(settings: HttpSettings) -> HttpServer {
        HttpServer { http: Http::new(settings.limits), settings, out: Vec::new(), responses: 0, timeouts: 0 }
    }

    /// Makes the timer fire no later than the deadline.
    fn arm(io: &mut Io<HttpConn>, conn: ConnId, st: &mut HttpConn) {
        if let Some((timer, at)) = st.timer {
            if at <= st.deadline {
                return; // fires first, then re-arms for the rest
            }
            io.cancel_timer(timer);
        }
        st.timer = Some((io.set_timer(st.deadline, conn.as_u64()), st.deadline));
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

    fn on_start(&mut self, io: &mut Io<HttpConn>) {
        self.refresh_date(io);
    }

    fn on_accept(&mut self, io: &mut Io<HttpConn>, conn: ConnId) -> HttpConn {
        // As nginx: the first request's head must come within the header timeout.
        let mut st = HttpConn {
            session: Session::default(),
            phase: Phase::Fresh,
            deadline: io.now() + self.settings.header_timeout,
            timer: None,
        };
        Self::arm(io, conn, &mut st);
        st
    }

    fn on_data(&mut self, io: &mut Io<HttpConn>, conn: ConnId, st: &mut HttpConn, data: &[u8]) -> usize {
        self.out.clear();
        let fed = self.http.feed(&mut st.session, data, &mut self.out);
        self.responses += u64::from(fed.responses);
        // Every response of the batch in one write: one send for a pipeline.
        if !self.out.is_empty() {
            let _ = io.write(conn, &self.out);
        }
        if fed.close {
            // Closing: no timeout may fire (and be counted) while it lingers.
            if let Some((timer, _)) = st.timer.take() {
                io.cancel_timer(timer);
            }
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
        match phase {
            // Empty lines alone do not extend an idle connection's time.
            Phase::Idle if fed.responses > 0 => st.deadline = now + self.settings.idle_timeout,
            Phase::Idle | Phase::Fresh => {}
            // A head's time runs from its first byte, however slowly it comes.
            Phase::Head if st.phase == Phase::Idle || fed.responses > 0 => {
                st.deadline = now + self.settings.header_timeout
            }
            Phase::Head => {}
            // A body may take long, but not pause for longer than the timeout.
            Phase::Body => st.deadline = now + self.settings.header_timeout,
        }
        st.phase = phase;
        Self::arm(io, conn, st);
        fed.consumed
    }

    fn on_timer(&mut self, io: &mut Io<HttpConn>, _timer: TimerId, token: u64) {
        if token == DATE_TIMER {
            self.refresh_date(io);
            return;
        }
        let conn = ConnId::from_u64(token);
        let now = io.now();
        let Some(st) = io.state(conn) else { return };
        st.timer = None;
        if now < st.deadline {
            let at = st.deadline;
            let timer = io.set_timer(at, token);
            if let Some(st) = io.state(conn) {
                st.timer = Some((timer, at));
            }
            return;
        }
        // A request under way gets a 408 (nginx closes silently; the status
        // tells a slow client why); an idle connection just closes.
        self.out.clear();
        if matches!(st.phase, Phase::Head | Phase::Body) {
            self.http.timed_out(&mut st.session, &mut self.out);
            self.responses += 1;
        }
        self.timeouts += 1;
        if !self.out.is_empty() {
            let _ = io.write(conn, &self.out);
        }
        io.close(conn);
    }

    fn on_close(&mut self, io: &mut Io<HttpConn>, _conn: ConnId, st: HttpConn, _reason: &CloseReason) {
        if let Some((timer, _)) = st.timer {
            io.cancel_timer(timer);
        }
    }
}
