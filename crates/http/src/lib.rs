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
    /// The pending request's head length, once complete while its body
    /// is arriving.
    head_len: Option<usize>,
}

impl Session {
    /// The pending request's head is complete and its body is arriving.
    pub fn in_body(&self) -> bool {
        self.head_len.is_some()
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
            let mid_request = session.scanned > 0 || session.head_len.is_some();
            while !mid_request && pos < input.len() && matches!(input[pos], b'\r' | b'\n') {
                pos += 1;
            }
            let rest = &input[pos..];
            if rest.is_empty() {
                return Fed { consumed: pos, responses, close: false, interim: false };
            }
            let Some(head_len) = session.head_len.or_else(|| scan::head_end(rest, session.scanned)) else {
                if rest.len() > self.limits.max_head {
                    return self.fail(session, out, input.len(), responses, Status::HeadTooLarge);
                }
                session.scanned = rest.len();
                return Fed { consumed: pos, responses, close: false, interim: false };
            };
            if head_len > self.limits.max_head {
                return self.fail(session, out, input.len(), responses, Status::HeadTooLarge);
            }
            match self.request(session, &rest[..head_len], rest, out) {
                Step::Done { used, close } => {
                    responses += 1;
                    *session = Session::default();
                    if close {
                        return Fed { consumed: input.len(), responses, close: true, interim: false };
                    }
                    pos += used;
                }
                Step::NeedBody { interim } => {
                    session.head_len = Some(head_len);
                    return Fed { consumed: pos, responses, close: false, interim };
                }
                Step::Fail(status) => return self.fail(session, out, input.len(), responses, status),
            }
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

    /// One request whose head is `head`, at the start of `rest`.
    fn request(&mut self, session: &mut Session, head_bytes: &[u8], rest: &[u8], out: &mut Vec<u8>) -> Step {
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut slots);
        match req.parse(head_bytes) {
            Ok(httparse::Status::Complete(n)) if n == head_bytes.len() => {}
            Err(httparse::Error::TooManyHeaders) => return Step::Fail(Status::HeadTooLarge),
            // A blank line was found, yet the parser sees no whole head (or
            // sees it end elsewhere): the head is malformed.
            _ => return Step::Fail(Status::BadRequest),
        }
        let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
            return Step::Fail(Status::BadRequest);
        };
        let head = match Head::read(req.headers) {
            Ok(head) => head,
            Err(status) => return Step::Fail(status),
        };
        let http11 = minor == 1;
        if http11 && !head.host {
            return Step::Fail(Status::BadRequest); // RFC 9112 3.2: Host is required in 1.1
        }
        if head.chunked_or_other_coding {
            return Step::Fail(Status::NotImplemented);
        }
        let body_len = head.content_length.unwrap_or(0);
        if body_len > self.limits.max_body {
            return Step::Fail(Status::BodyTooLarge);
        }
        let used = head_bytes.len() + body_len;
        if rest.len() < used {
            // Only a 1.1 client waits for it, and only before sending the body.
            let interim = head.expect_continue && http11 && !session.continue_sent && rest.len() == head_bytes.len();
            if interim {
                out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                session.continue_sent = true;
            }
            return Step::NeedBody { interim };
        }
        let body = &rest[head_bytes.len()..used];
        let close = head.close || (!http11 && !head.keep_alive);
        self.answer(method, target, body, close, !http11 && !close, out);
        Step::Done { used, close }
    }

    fn answer(
        &mut self,
        method: &str,
        target: &str,
        body: &[u8],
        close: bool,
        keep_alive_header: bool,
        out: &mut Vec<u8>,
    ) {
        let path = target.split_once('?').map_or(target, |(path, _)| path);
        let head_only = method == "HEAD";
        let (status, content_type, allow) = match (path, method) {
            ("/plaintext", "GET") if !close && !keep_alive_header => {
                out.extend_from_slice(&self.plaintext);
                return;
            }
            ("/plaintext" | "/json", "GET" | "HEAD") => (Status::Ok, "text/plain", None),
            ("/plaintext" | "/json", _) => (Status::MethodNotAllowed, "text/plain", Some("GET, HEAD")),
            ("/echo", "POST") => (Status::Ok, "application/octet-stream", None),
            ("/echo", _) => (Status::MethodNotAllowed, "text/plain", Some("POST")),
            _ => (Status::NotFound, "text/plain", None),
        };
        self.scratch.clear();
        let payload: &[u8] = match (status, path) {
            (Status::Ok, "/plaintext") => response::PLAINTEXT,
            (Status::Ok, "/json") => {
                // Serialized per request, as TechEmpower's json test asks.
                let _ = serde_json::to_writer(&mut self.scratch, &response::Message { message: "Hello, World!" });
                &self.scratch
            }
            (Status::Ok, _) => body,
            _ => status.explanation().as_bytes(),
        };
        let content_type = if (status, path) == (Status::Ok, "/json") { "application/json" } else { content_type };
        let mut response = Response::new(status, &self.date).content_type(content_type);
        if let Some(allow) = allow {
            response = response.allow(allow);
        }
        if close {
            response = response.close();
        } else if keep_alive_header {
            response = response.keep_alive();
        }
        if head_only {
            response.write_head_only(out, payload.len());
        } else {
            response.write(out, payload);
        }
    }
}

enum Step {
    /// Answered; `used` bytes of input were the request.
    Done { used: usize, close: bool },
    /// The head is complete, the body is not (`interim`: a `100 Continue`
    /// was appended).
    NeedBody { interim: bool },
    /// Answer with this status and close.
    Fail(Status),
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
