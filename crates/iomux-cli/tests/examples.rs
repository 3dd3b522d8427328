//! The library's examples, built by `cargo test` and run here as a user
//! would: a client checks their answers on every backend.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::load;

/// The example's binary (cargo builds examples for `cargo test`; when only
/// this package's tests were built, build it now).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo).args(["build", "-p", "iomux", "--example", name]).status().expect("cargo build");
        assert!(ok.success(), "building example {name} failed");
    }
    path
}

/// A running example: its address comes from the "listening on" line.
struct Running {
    child: Child,
    addr: SocketAddr,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Running {
    fn start(name: &str, backend: &str, args: &[&str]) -> Running {
        let mut child = Command::new(example(name))
            .args(args)
            .env("IOMUX_BACKEND", backend)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn example");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read banner");
        let addr = line
            .split_whitespace()
            .find_map(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{name} on {backend}: no address in {line:?}"));
        Running { child, addr, stdout }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        s
    }

    /// SIGINT (Ctrl-C): the example must stop by itself, with status 0;
    /// returns the rest of its output.
    fn interrupt(mut self) -> String {
        let ok = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status().expect("kill");
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            assert!(Instant::now() < deadline, "the example did not stop within 10 s of SIGINT");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "the example exited with {status}");
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).expect("read output");
        rest
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// examples/echo.rs under `iomux load`: every byte verified, then Ctrl-C.
fn echo_example_serves_a_verified_load(backend: &str) {
    let server = Running::start("echo", backend, &["127.0.0.1:0", "2"]);
    let run = load(server.addr, &["--conns", "100", "--duration", "1"]);
    assert!(run.status.success(), "{backend}: load failed: {}", run.output);
    assert_eq!(run.report["errors"]["total"], 0, "{backend}: {}", run.output);
    assert!(run.report["echoes"].as_u64().unwrap_or(0) > 1000, "{backend}: {}", run.report);
    let rest = server.interrupt();
    assert!(rest.contains("stopped after 100 connections"), "{backend}: {rest:?}");
}

/// Sends `request` one byte at a time (the server must put lines back
/// together) and reads `lines` lines of answer.
fn ask(s: &mut TcpStream, request: &[u8], lines: usize) -> Vec<String> {
    for b in request {
        s.write_all(&[*b]).expect("write");
    }
    let mut reader = BufReader::new(s.try_clone().expect("clone"));
    (0..lines)
        .map(|_| {
            let mut line = String::new();
            reader.read_line(&mut line).expect("read answer");
            line.trim_end().to_string()
        })
        .collect()
}

/// examples/kv.rs: commands split byte by byte and several per write, the
/// idle timeout, QUIT.
fn kv_example_answers_lines(backend: &str) {
    let server = Running::start("kv", backend, &["127.0.0.1:0", "0.5"]);
    let mut s = server.connect();
    let answers = ask(&mut s, b"SET a 1\nSET b two words\nGET a\nGET b\nDEL a\nGET a\nBOGUS\n", 7);
    assert_eq!(answers[..6], ["OK", "OK", "VALUE 1", "VALUE two words", "OK", "NOT_FOUND"], "{backend}");
    assert!(answers[6].starts_with("ERR unknown command"), "{backend}: {answers:?}");
    // A second connection shares the store.
    let mut t = server.connect();
    assert_eq!(ask(&mut t, b"GET b\r\nQUIT\n", 2), ["VALUE two words", "BYE"], "{backend}");
    let mut rest = Vec::new();
    t.read_to_end(&mut rest).expect("EOF after BYE");
    assert!(rest.is_empty(), "{backend}: after BYE: {rest:?}");
    // Silence past the idle timeout: told so, then closed.
    let started = Instant::now();
    let mut idle = String::new();
    s.read_to_string(&mut idle).expect("read until EOF");
    assert_eq!(idle, "IDLE\n", "{backend}");
    assert!(started.elapsed() >= Duration::from_millis(400), "{backend}: closed too early");
    s.shutdown(Shutdown::Both).ok();
    server.interrupt();
}

/// examples/proxy.rs in front of `iomux serve --proto echo`: a verified
/// load through it, and a client that sends, shuts its write side down
/// and gets everything back, then the end.
fn proxy_example_relays_to_a_real_upstream(backend: &str) {
    let upstream = support::Serve::start("epoll", &["--proto", "echo"]);
    let up = upstream.addr.to_string();
    let proxy = Running::start("proxy", backend, &["127.0.0.1:0", &up]);
    let run = load(proxy.addr, &["--conns", "20", "--requests", "2000"]);
    assert!(run.status.success(), "proxy on {backend}: {}", run.output);
    assert_eq!(run.report["errors"]["total"], 0, "proxy on {backend}: {}", run.output);
    assert_eq!(run.report["echoes"], 2000, "proxy on {backend}: {}", run.report);
    let mut c = proxy.connect();
    let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    c.write_all(&sent).expect("send through the proxy");
    c.shutdown(Shutdown::Write).expect("half-close");
    let mut got = Vec::new();
    c.read_to_end(&mut got).expect("the echo, then the end");
    assert!(got == sent, "proxy on {backend}: {} bytes back of {}", got.len(), sent.len());
    let said = proxy.interrupt();
    assert!(said.contains("stopped after"), "proxy on {backend}: {said}");
    upstream.stop();
}

on_every_backend! { echo_example_serves_a_verified_load, kv_example_answers_lines, proxy_example_relays_to_a_real_upstream }
