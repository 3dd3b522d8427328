//! `iomux serve --proto http` on every backend: pipelining in order,
//! keep-alive, the limits and bad input (431/413/400/404/405), the header
//! (slowloris) and idle timeouts, 10,000 idle keep-alive connections, and
//! a request split byte by byte. Real sockets, a real client parser.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::*;

/// One parsed response.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Reads responses off a connection, keeping what follows the last one.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn new(server: &Serve) -> Client {
        Client { stream: server.connect(), buf: Vec::new() }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send request");
    }

    /// The next response.
    fn response(&mut self) -> Response {
        loop {
            let mut slots = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Response::new(&mut slots);
            if let httparse::Status::Complete(head) = parsed.parse(&self.buf).expect("a well-formed response") {
                let status = parsed.code.expect("status");
                let headers: Vec<(String, String)> = parsed
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                let len: usize = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .map(|(_, v)| v.parse().expect("Content-Length"))
                    .expect("every response has a Content-Length");
                while self.buf.len() < head + len {
                    self.fill();
                }
                let body = self.buf[head..head + len].to_vec();
                self.buf.drain(..head + len);
                return Response { status, headers, body };
            }
            self.fill();
        }
    }

    fn fill(&mut self) {
        let mut chunk = [0u8; 64 << 10];
        let n = self.stream.read(&mut chunk).expect("read response");
        assert!(n > 0, "the server closed before a whole response; have {:?}", String::from_utf8_lossy(&self.buf));
        self.buf.extend_from_slice(&chunk[..n]);
    }

    /// The server closes: EOF (or a reset) after any bytes already read.
    fn expect_closed(&mut self, within: Duration) {
        self.stream.set_read_timeout(Some(within)).expect("timeout");
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => {}
            Ok(n) => panic!("bytes after the last response: {:?}", String::from_utf8_lossy(&chunk[..n])),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) => panic!("not closed within {within:?}: {e}"),
        }
    }
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").into_bytes()
}

fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!("POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    r
}

fn serve(backend: &str, extra: &[&str]) -> Serve {
    let mut args = vec!["--proto", "http"];
    args.extend_from_slice(extra);
    Serve::start(backend, &args)
}

fn pipelined_requests_answered_in_order(backend: &str) {
    let server = serve(backend, &[]);
    let mut c = Client::new(&server);
    let mut rng = Rng::new(7);
    let body = rng.bytes(3000);
    // 50 rounds of four requests, all in one write each round.
    for _ in 0..50 {
        let mut batch = get("/plaintext");
        batch.extend(get("/json"));
        batch.extend(post("/echo", &body));
        batch.extend(get("/missing"));
        c.send(&batch);
        let r = c.response();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"Hello, World!"[..]));
        assert_eq!(r.header("Content-Type"), Some("text/plain"));
        assert!(r.header("Date").is_some_and(|d| d.ends_with(" GMT") && d.len() == 29));
        let r = c.response();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{\"message\":\"Hello, World!\"}"[..]));
        let r = c.response();
        assert_eq!(r.status, 200);
        assert!(r.body == body, "echoed body differs");
        assert_eq!(c.response().status, 404);
    }
    let (stats, _) = server.stop();
    assert_eq!(stats["http_responses"], 200, "{stats}");
}

fn keep_alive_across_many_requests(backend: &str) {
    let server = serve(backend, &[]);
    let mut c = Client::new(&server);
    for i in 0..2000 {
        c.send(&get(if i % 2 == 0 { "/plaintext" } else { "/json" }));
        let r = c.response();
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.header("Connection"), None, "HTTP/1.1 keeps the connection without saying so");
    }
    // HTTP/1.0 asking to keep alive is told so; plain 1.0 is closed.
    c.send(b"GET /plaintext HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(c.response().header("Connection"), Some("keep-alive"));
    c.send(b"GET /plaintext HTTP/1.0\r\n\r\n");
    assert_eq!(c.response().header("Connection"), Some("close"));
    c.expect_closed(Duration::from_secs(10));
    let (stats, _) = server.stop();
    assert_eq!(stats["accepted"], 1, "one connection carried every request: {stats}");
}

/// Sends `request` on a fresh connection: the status, then the close.
fn refused_and_closed(server: &Serve, request: &[u8], status: u16) {
    let mut c = Client::new(server);
    c.send(request);
    let r = c.response();
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&request[..request.len().min(80)]));
    assert_eq!(r.header("Connection"), Some("close"));
    c.expect_closed(Duration::from_secs(10));
}

fn limits_and_bad_input(backend: &str) {
    let server = serve(backend, &["--http-max-body", "1000"]);
    // 431: a head over 8 KiB, ended or not.
    let big = format!("GET /plaintext HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "a".repeat(9000));
    refused_and_closed(&server, big.as_bytes(), 431);
    refused_and_closed(&server, &big.as_bytes()[..8500], 431);
    // 413: a body over the limit, answered before it is sent.
    refused_and_closed(&server, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n", 413);
    // 400: malformed.
    refused_and_closed(&server, b"NOT HTTP AT ALL\r\n\r\n", 400);
    refused_and_closed(&server, b"GET /plaintext HTTP/1.1\r\n\r\n", 400); // no Host
                                                                          // 501: a chunked body.
    refused_and_closed(&server, b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501);
    // 404 and 405 keep the connection.
    let mut c = Client::new(&server);
    c.send(&get("/nope"));
    assert_eq!(c.response().status, 404);
    c.send(b"PUT /plaintext HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    let r = c.response();
    assert_eq!((r.status, r.header("Allow")), (405, Some("GET, HEAD")));
    c.send(&get("/echo"));
    assert_eq!(c.response().header("Allow"), Some("POST"));
    c.send(&post("/echo", &[7u8; 1000])); // exactly at the limit
    assert_eq!(c.response().body, vec![7u8; 1000]);
    server.stop();
}

fn slowloris_closed_by_the_header_timeout(backend: &str) {
    let server = serve(backend, &["--http-header-timeout", "0.5"]);
    let mut c = Client::new(&server);
    c.stream.set_nodelay(true).expect("nodelay");
    let started = Instant::now();
    c.send(b"GET /plaintext HTTP/1.1\r\n");
    // A header byte every 50 ms for up to 3 s: reads keep coming, the head
    // never ends. The answer must come at the timeout, not after the last byte.
    c.stream.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    let mut chunk = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(3) {
        match c.stream.read(&mut chunk) {
            Ok(n) => {
                c.buf.extend_from_slice(&chunk[..n]);
                break;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading while dribbling: {e}"),
        }
        c.send(b"X");
    }
    let answered = started.elapsed();
    c.stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let r = c.response();
    assert_eq!((r.status, r.header("Connection")), (408, Some("close")));
    c.expect_closed(Duration::from_secs(5));
    assert!(answered < Duration::from_millis(1500), "answered after {answered:?} of dribbling; timeout 0.5 s");
    // A connection that never sends is closed too, without a response.
    let mut silent = Client::new(&server);
    silent.expect_closed(Duration::from_secs(5));
    let (stats, _) = server.stop();
    assert_eq!(stats["http_timeouts"], 2, "{stats}");
}

fn idle_keep_alive_closed_by_the_idle_timeout(backend: &str) {
    let server = serve(backend, &["--http-idle-timeout", "0.3", "--http-header-timeout", "5"]);
    let mut c = Client::new(&server);
    // From before the request: the server's idle time starts after it, so
    // at least the timeout must have passed, however late this thread runs.
    let idle_from = Instant::now();
    c.send(&get("/plaintext"));
    assert_eq!(c.response().status, 200);
    c.expect_closed(Duration::from_secs(5));
    let idle = idle_from.elapsed();
    assert!(idle >= Duration::from_millis(300) && idle < Duration::from_secs(3), "closed after {idle:?} idle");
    server.stop();
}

fn ten_thousand_idle_keep_alive_connections_held(backend: &str) {
    const CONNS: usize = 10_000;
    let _heavy = heavy();
    raise_fd_limit();
    // select watches descriptors below FD_SETSIZE (1024) only: its way to
    // 10,000 connections is several processes, each under the limit.
    let procs: &[&str] = if backend == "select" { &["--procs", "16"] } else { &[] };
    let server = serve(backend, procs);
    let mut clients: Vec<Client> = (0..CONNS).map(|_| Client::new(&server)).collect();
    for c in &mut clients {
        c.send(&get("/plaintext"));
    }
    for c in &mut clients {
        assert_eq!(c.response().status, 200);
    }
    std::thread::sleep(Duration::from_secs(1));
    // Still held: each answers again, in the reverse order.
    for c in clients.iter_mut().rev() {
        c.send(&get("/json"));
    }
    for c in clients.iter_mut().rev() {
        assert_eq!(c.response().status, 200);
    }
    drop(clients);
    let (stats, _) = server.stop();
    assert_eq!(stats["accepted"], CONNS as u64, "{stats}");
    assert_eq!(stats["closed_abnormally"], 0, "{stats}");
}

fn request_split_byte_by_byte(backend: &str) {
    let server = serve(backend, &[]);
    let mut c = Client::new(&server);
    c.stream.set_nodelay(true).expect("nodelay");
    let mut request = post("/echo?split=1", b"every byte alone");
    request.extend(get("/plaintext"));
    for b in &request {
        c.send(std::slice::from_ref(b));
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(c.response().body, b"every byte alone");
    assert_eq!(c.response().body, b"Hello, World!");
    server.stop();
}

on_every_backend! {
    pipelined_requests_answered_in_order,
    keep_alive_across_many_requests,
    limits_and_bad_input,
    slowloris_closed_by_the_header_timeout,
    idle_keep_alive_closed_by_the_idle_timeout,
    ten_thousand_idle_keep_alive_connections_held,
    request_split_byte_by_byte,
}
