//! HTTP/1.1 for `iomux serve --proto http`, as a state machine with no
//! sockets: bytes in, response bytes out. The server glue hands each
//! connection's unconsumed input to [`Http::feed`] and writes what it
//! appended to `out` in one write, so pipelined requests are answered in
//! order and in one batch.
//!
//! Parsing is httparse's; this crate only finds where a request head ends
//! (so a head arriving byte by byte is not re-parsed from the start each
//! time), applies the limits and answers the routes:
//!
//! - `GET /plaintext`: `Hello, World!`, TechEmpower's plaintext response;
//! - `GET /json`: `{"message":"Hello, World!"}`, serialized per request;
//! - `POST /echo`: the request body back.
//!
//! `HEAD` is answered for the GET routes. Bad input is answered as nginx
//! answers it, then the connection closes: a head over the limit 431, a
//! body over the limit 413, malformed input 400, a chunked body 501.
//! An unknown path is 404 and a wrong method 405 (with `Allow`); both keep
//! the connection.
//!
//! ```
//! use iomux_http::{Http, Limits, Session};
//!
//! let mut http = Http::new(Limits::default());
//! let mut session = Session::default();
//! let mut out = Vec::new();
//! let input = b"GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\nGET /json HTTP/1.1\r\nHost: x\r\n\r\nGET /pla";
//! let fed = http.feed(&mut session, input, &mut out);
//! assert_eq!(fed.responses, 2);
//! assert!(!fed.close);
//! assert_eq!(&input[fed.consumed..], b"GET /pla"); // handed back with what comes next
//! assert!(out.starts_with(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n"));
//! ```

pub mod conformance;
mod response;
mod scan;

use response::{Response, Status};
use std::time::SystemTime;

/// Size limits, as nginx's `large_client_header_buffers` and
/// `client_max_body_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Request line and headers, with their line ends, at most (else 431).
    pub max_head: usize,
    /// A request body (Content-Length) at most (else 413).
    pub max_body: usize,
}

impl Default for Limits {
    /// 8 KiB of head, 1 MiB of body (nginx's defaults).
    fn default() -> Limits {
        Limits { max_head: 8 << 10, max_body: 1 << 20 }
    }
}

impl Limits {
    /// The most input a connection can leave unconsumed: one whole request
    /// still arriving. The server's input bound must be at least this.
    pub fn max_pending(&self) -> usize {
        self.max_head.saturating_add(self.max_body)
    }
}

/// One connection's parsing state, kept between calls to [`Http::feed`].
#[derive(Debug, Default)]
pub struct Session {
    /// Bytes of the pending request head already searched for its end.
    scanned: usize,
    /// A `100 Continue` was sent for the pending request.
    continue_sent: bool,
    /// The pending request, once its head is complete and while its body
    /// arrives.
    pending: Option<Plan>,
}

impl Session {
    /// The pending request's head is complete and its body is arriving.
    pub fn in_body(&self) -> bool {
        self.pending.is_some()
    }
}

/// What [`Http::feed`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fed {
    /// Input bytes used; the rest (a request not yet complete) must be
    /// handed back, followed by what arrives next.
    pub consumed: usize,
    /// Final responses appended to `out` (interim `100 Continue` not counted).
    pub responses: u32,
    /// Close the connection once `out` is sent; nothing more is read.
    pub close: bool,
    /// `out` ends with an interim `100 Continue` for the pending request.
    pub interim: bool,
}

/// The server side: limits, the cached `Date` and the responses built
/// from it. One per event loop.
pub struct Http {
    limits: Limits,
    /// IMF-fixdate, 29 bytes, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    date: [u8; 29],
    /// The whole keep-alive `/plaintext` response, rebuilt when the date changes.
    plaintext: Vec<u8>,
    scratch: Vec<u8>,
}

/// Headers a request can carry that change how it is answered.
#[derive(Default)]
struct Head {
    content_length: Option<usize>,
    chunked_or_other_coding: bool,
    close: bool,
    keep_alive: bool,
    expect_continue: bool,
    host: bool,
}

impl Http {
    /// A server with these limits, dated now.
    pub fn new(limits: Limits) -> Http {
        let mut http = Http { limits, date: [b' '; 29], plaintext: Vec::new(), scratch: Vec::new() };
        http.set_date(SystemTime::now());
        http
    }

    /// The limits it applies.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Sets the `Date` every response carries (the server calls this once
    /// a second; tests pin it).
    pub fn set_date(&mut self, now: SystemTime) {
        let text = httpdate::fmt_http_date(now);
        // IMF-fixdate is always 29 bytes for years 1000-9999.
        if text.len() == self.date.len() {
            self.date.copy_from_slice(text.as_bytes());
        }
        self.plaintext.clear();
        Response::new(Status::Ok, &self.date)
            .content_type("text/plain")
            .write(&mut self.plaintext, response::PLAINTEXT);
    }

    /// Answers every complete request at the start of `input`, appending
    /// the responses to `out`. Stops at a request not yet complete, or at
    /// one answered with a close.
    pub fn feed(&mut self, session: &mut Session, input: &[u8], out: &mut Vec<u8>) -> Fed {
        let mut pos = 0;
        let mut responses = 0;
        loop {
            // Empty lines before a request line are ignored (RFC 9112 2.2).
            let mid_request = session.scanned > 0 || session.pending.is_some();
            while !mid_request && pos < input.len() && matches!(input[pos], b'\r' | b'\n') {
                pos += 1;
            }
            let rest = &input[pos..];
            if rest.is_empty() {
                return Fed { consumed: pos, responses, close: false, interim: false };
            }
            // A head is parsed once: while its body arrives (perhaps a byte
            // at a time) the decision taken from it is kept.
            let plan = match session.pending {
                Some(plan) => plan,
                None => {
                    let Some(head_len) = scan::head_end(rest, session.scanned) else {
                        if rest.len() > self.limits.max_head {
                            return self.fail(session, out, input.len(), responses, Status::HeadTooLarge);
                        }
                        session.scanned = rest.len();
                        return Fed { consumed: pos, responses, close: false, interim: false };
                    };
                    if head_len > self.limits.max_head {
                        return self.fail(session, out, input.len(), responses, Status::HeadTooLarge);
                    }
                    match self.plan(&rest[..head_len]) {
                        Ok(plan) => plan,
                        Err(status) => return self.fail(session, out, input.len(), responses, status),
                    }
                }
            };
            let used = plan.head_len + plan.body_len;
            if rest.len() < used {
                // Only a 1.1 client waits for it, and only before sending the body.
                let interim = plan.expect_continue && !session.continue_sent && rest.len() == plan.head_len;
                if interim {
                    out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    session.continue_sent = true;
                }
                session.pending = Some(plan);
                return Fed { consumed: pos, responses, close: false, interim };
            }
            self.answer(&plan, &rest[plan.head_len..used], out);
            responses += 1;
            *session = Session::default();
            if plan.close {
                return Fed { consumed: input.len(), responses, close: true, interim: false };
            }
            pos += used;
        }
    }

    /// The response for a request whose head has not arrived in time
    /// (nginx's client_header_timeout): 408, then close.
    pub fn timed_out(&mut self, session: &mut Session, out: &mut Vec<u8>) {
        self.fail(session, out, 0, 0, Status::RequestTimeout);
    }

    fn fail(
        &mut self,
        session: &mut Session,
        out: &mut Vec<u8>,
        consumed: usize,
        responses: u32,
        status: Status,
    ) -> Fed {
        *session = Session::default();
        Response::new(status, &self.date).close().write(out, status.explanation().as_bytes());
        Fed { consumed, responses: responses + 1, close: true, interim: false }
    }

    /// How to answer the request whose whole head is `head_bytes`, or the
    /// error status to close with.
    fn plan(&self, head_bytes: &[u8]) -> Result<Plan, Status> {
        // Uninitialized slots: filling 64 empty headers (2 KiB) on every
        // request cost more than parsing a short head.
        let mut slots = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; 64];
        let mut req = httparse::Request::new(&mut []);
        match req.parse_with_uninit_headers(head_bytes, &mut slots) {
            Ok(httparse::Status::Complete(n)) if n == head_bytes.len() => {}
            Err(httparse::Error::TooManyHeaders) => return Err(Status::HeadTooLarge),
            // A blank line was found, yet the parser sees no whole head (or
            // sees it end elsewhere): the head is malformed.
            _ => return Err(Status::BadRequest),
        }
        let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
            return Err(Status::BadRequest);
        };
        let head = Head::read(req.headers)?;
        let http11 = minor == 1;
        if http11 && !head.host {
            return Err(Status::BadRequest); // RFC 9112 3.2: Host is required in 1.1
        }
        if head.chunked_or_other_coding {
            return Err(Status::NotImplemented);
        }
        let body_len = head.content_length.unwrap_or(0);
        // Also bounded so that head + body cannot overflow, whatever Limits say.
        if body_len > self.limits.max_body.min(usize::MAX - head_bytes.len()) {
            return Err(Status::BodyTooLarge);
        }
        let close = head.close || (!http11 && !head.keep_alive);
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        let route = match (path, method) {
            ("/plaintext", "GET" | "HEAD") => Route::Plaintext,
            ("/json", "GET" | "HEAD") => Route::Json,
            ("/plaintext" | "/json", _) => Route::MethodNotAllowed("GET, HEAD"),
            ("/echo", "POST") => Route::Echo,
            ("/echo", _) => Route::MethodNotAllowed("POST"),
            _ => Route::NotFound,
        };
        Ok(Plan {
            route,
            head_only: method == "HEAD",
            close,
            keep_alive_header: !http11 && !close,
            // Only a route that reads the body asks for it.
            expect_continue: head.expect_continue && http11 && matches!(route, Route::Echo),
            head_len: head_bytes.len(),
            body_len,
        })
    }

    fn answer(&mut self, plan: &Plan, body: &[u8], out: &mut Vec<u8>) {
        if let (Route::Plaintext, false, false, false) =
            (plan.route, plan.head_only, plan.close, plan.keep_alive_header)
        {
            out.extend_from_slice(&self.plaintext);
            return;
        }
        self.scratch.clear();
        let (status, content_type, payload): (Status, &str, &[u8]) = match plan.route {
            Route::Plaintext => (Status::Ok, "text/plain", response::PLAINTEXT),
            Route::Json => {
                // Serialized per request, as TechEmpower's json test asks.
                let _ = serde_json::to_writer(&mut self.scratch, &response::Message { message: "Hello, World!" });
                (Status::Ok, "application/json", &self.scratch)
            }
            Route::Echo => (Status::Ok, "application/octet-stream", body),
            Route::NotFound => (Status::NotFound, "text/plain", Status::NotFound.explanation().as_bytes()),
            Route::MethodNotAllowed(_) => {
                (Status::MethodNotAllowed, "text/plain", Status::MethodNotAllowed.explanation().as_bytes())
            }
        };
        let mut response = Response::new(status, &self.date).content_type(content_type);
        if let Route::MethodNotAllowed(allow) = plan.route {
            response = response.allow(allow);
        }
        if plan.close {
            response = response.close();
        } else if plan.keep_alive_header {
            response = response.keep_alive();
        }
        if plan.head_only {
            response.write_head_only(out, payload.len());
        } else {
            response.write(out, payload);
        }
    }
}

/// What a request's head decided, kept while its body arrives.
#[derive(Clone, Copy, Debug)]
struct Plan {
    route: Route,
    head_only: bool,
    close: bool,
    /// An HTTP/1.0 client that asked to keep the connection is told so.
    keep_alive_header: bool,
    expect_continue: bool,
    head_len: usize,
    body_len: usize,
}

#[derive(Clone, Copy, Debug)]
enum Route {
    Plaintext,
    Json,
    Echo,
    NotFound,
    /// With the methods the path allows.
    MethodNotAllowed(&'static str),
}

impl Head {
    fn read(headers: &[httparse::Header<'_>]) -> Result<Head, Status> {
        let mut head = Head::default();
        for h in headers {
            let name = h.name;
            if name.eq_ignore_ascii_case("content-length") {
                let len = parse_length(h.value).ok_or(Status::BadRequest)?;
                // Two different lengths: which one frames the body is
                // ambiguous (request smuggling), so refuse.
                if head.content_length.is_some_and(|l| l != len) {
                    return Err(Status::BadRequest);
                }
                head.content_length = Some(len);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                head.chunked_or_other_coding = true;
            } else if name.eq_ignore_ascii_case("connection") {
                for token in h.value.split(|&b| b == b',') {
                    let token = token.trim_ascii();
                    head.close |= token.eq_ignore_ascii_case(b"close");
                    head.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            } else if name.eq_ignore_ascii_case("expect") {
                head.expect_continue |= h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
            } else if name.eq_ignore_ascii_case("host") {
                if head.host {
                    return Err(Status::BadRequest); // RFC 9112 3.2: exactly one Host
                }
                head.host = true;
            }
        }
        if head.chunked_or_other_coding && head.content_length.is_some() {
            return Err(Status::BadRequest); // RFC 9112 6.1: both is an attack
        }
        Ok(head)
    }
}

/// Content-Length: decimal digits only (no sign, no spaces inside), not
/// overflowing.
fn parse_length(value: &[u8]) -> Option<usize> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0usize, |n, &d| n.checked_mul(10)?.checked_add(usize::from(d - b'0')))
}

#[cfg(test)]
mod tests;
