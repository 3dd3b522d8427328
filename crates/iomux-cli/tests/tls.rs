//! `iomux serve` over TLS on every backend, judged by clients nobody here
//! wrote: curl over https, openssl s_client with TLS 1.2 and 1.3 and a
//! resumed session, redis-cli --tls; and 64 MiB echoed intact over TLS
//! to a slow reader while the server's memory stays bounded.
//!
//! Without curl, openssl or redis-cli a test says so and passes, except
//! under CI=true, where .ci/run has installed them
//! (scripts/install-http-tools).

mod support;

use iomux_tls::rustls::pki_types::ServerName;
use iomux_tls::rustls::{self, ClientConfig, ClientConnection};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

on_every_backend! {
    curl_gets_plaintext_over_https,
    wrk_and_h2load_over_https,
    openssl_speaks_both_versions_and_resumes,
    redis_cli_over_tls,
    a_slow_reader_gets_64_mib_intact_with_memory_bounded,
    iomux_load_speaks_tls_resumed_or_full,
    a_proxy_terminates_tls_in_front_of_a_plaintext_upstream,
}

/// A client program, or None (said) when it is missing outside CI.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()));
    if found.is_none() {
        assert!(std::env::var("CI").is_err(), "CI=true but {name} is missing (scripts/install-http-tools)");
        eprintln!("skipped: no {name} (scripts/install-http-tools installs it)");
    }
    found
}

/// `iomux serve` with a made certificate, written into a folder the test
/// owns; returns the server and the certificate's path.
fn tls_serve(backend: &str, proto: &str) -> (Serve, PathBuf, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let serve = Serve::start(backend, &["--proto", proto, "--tls-self-signed", dir.path().to_str().unwrap()]);
    assert!(serve.banner.contains("TLS, self-signed"), "{backend}: {}", serve.banner);
    let cert = dir.path().join("cert.pem");
    (serve, cert, dir)
}

/// A folder removed at the end of the test.
mod tempdir {
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("iomux-tls-test-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&path).expect("a test folder");
            Dir(path)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn output(cmd: &mut Command, stdin: &[u8], what: &str) -> String {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect(what);
    child.stdin.take().expect("stdin").write_all(stdin).expect("stdin");
    let out = child.wait_with_output().expect(what);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} exited with {}: {text}", out.status);
    text
}

/// curl, verifying the made certificate against 127.0.0.1, gets the
/// plaintext page over HTTP/1.1 (offered by ALPN).
fn curl_gets_plaintext_over_https(backend: &str) {
    let Some(curl) = tool("curl") else { return };
    let (serve, cert, _dir) = tls_serve(backend, "http");
    let url = format!("https://127.0.0.1:{}/plaintext", serve.addr.port());
    let mut cmd = Command::new(curl);
    cmd.args(["-sS", "--max-time", "10", "-w", "\n%{http_version}", "--cacert"]).arg(&cert).arg(&url);
    let text = output(&mut cmd, b"", "curl");
    assert_eq!(text.trim_end(), "Hello, World!\n1.1", "{backend}");
    let (stats, _) = serve.stop();
    assert_eq!(stats["http_responses"], 1, "{backend}: {stats}");
}

/// wrk (keep-alive, 4 connections for a second) and h2load (200
/// requests over HTTP/1.1 chosen by ALPN) get every answer, without an
/// error.
fn wrk_and_h2load_over_https(backend: &str) {
    let (Some(wrk), Some(h2load)) = (tool("wrk"), tool("h2load")) else { return };
    let _busy = busy();
    let (serve, _cert, _dir) = tls_serve(backend, "http");
    let url = format!("https://127.0.0.1:{}/plaintext", serve.addr.port());
    // A longer timeout than wrk's 2 s: six servers share two busy CPUs.
    let text = output(Command::new(wrk).args(["-t1", "-c4", "-d1s", "--timeout", "10s", &url]), b"", "wrk");
    assert!(text.contains("Requests/sec:"), "{backend}: {text}");
    assert!(!text.contains("Socket errors") && !text.contains("Non-2xx"), "{backend}: {text}");
    let text = output(Command::new(h2load).args(["--h1", "-n200", "-c4", &url]), b"", "h2load");
    assert!(text.contains("200 succeeded, 0 failed, 0 errored"), "{backend}: {text}");
    let (stats, _) = serve.stop();
    let responses = stats["http_responses"].as_u64().unwrap_or(0);
    assert!(responses > 200, "{backend}: {responses} responses: {stats}");
}

/// openssl s_client verifies the certificate with TLS 1.2 and with TLS
/// 1.3, and its second connection of each resumes the session the first
/// saved.
fn openssl_speaks_both_versions_and_resumes(backend: &str) {
    let Some(openssl) = tool("openssl") else { return };
    let (serve, cert, dir) = tls_serve(backend, "http");
    let connect = format!("127.0.0.1:{}", serve.addr.port());
    let request = b"GET /plaintext HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    for (flag, version) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let session = dir.path().join(format!("session{flag}.pem"));
        for round in 0..2 {
            let mut cmd = Command::new(&openssl);
            cmd.args(["s_client", "-connect", &connect, flag, "-servername", "localhost", "-ign_eof", "-CAfile"])
                .arg(&cert)
                .arg(if round == 0 { "-sess_out" } else { "-sess_in" })
                .arg(&session);
            let text = output(&mut cmd, request, "openssl s_client");
            let what = format!("{backend} {version} round {round}");
            assert!(text.contains("Verify return code: 0 (ok)"), "{what}: {text}");
            assert!(
                text.contains(&format!("Protocol  : {version}")) || text.contains(&format!(", {version},")),
                "{what}: {text}"
            );
            assert!(text.contains("Hello, World!"), "{what}: {text}");
            assert_eq!(text.contains("Reused,"), round == 1, "{what}: resumed only the second time: {text}");
        }
    }
    // The server counted the same: a full handshake, then a resumed one, twice.
    let (stats, _) = serve.stop();
    let want = serde_json::json!({"full_handshakes": 2, "resumed_handshakes": 2, "failed": 0});
    assert_eq!(stats["tls"], want, "{backend}: {stats}");
}

/// redis-cli --tls against `serve --proto resp`: SET, GET, INCR.
fn redis_cli_over_tls(backend: &str) {
    let Some(cli) = tool("redis-cli") else { return };
    let (serve, cert, _dir) = tls_serve(backend, "resp");
    let port = serve.addr.port().to_string();
    let run = |args: &[&str]| {
        let mut cmd = Command::new(&cli);
        cmd.args(["--tls", "--cacert"]).arg(&cert).args(["-h", "127.0.0.1", "-p", &port]).args(args);
        output(&mut cmd, b"", "redis-cli").trim().to_string()
    };
    assert_eq!(run(&["SET", "k", "over tls"]), "OK", "{backend}");
    assert_eq!(run(&["GET", "k"]), "over tls", "{backend}");
    assert_eq!(run(&["INCR", "n"]), "1", "{backend}");
    drop(serve);
}

/// 64 MiB written to the TLS echo server by one thread while another
/// reads the echo slowly: every byte comes back in order, and the
/// server's memory grows by far less than what passes through it (its
/// output bound, 4 MiB, holds through the layer).
fn a_slow_reader_gets_64_mib_intact_with_memory_bounded(backend: &str) {
    const TOTAL: usize = 64 << 20;
    const GROWTH_BOUND: u64 = 24 << 20;
    let _measuring = measuring();
    let (serve, cert, _dir) = tls_serve(backend, "echo");
    let idle = serve.rss();
    let peak = PeakRss::start(serve.pid());
    let mut tcp = serve.connect();
    tcp.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut client = tls_client(&cert);
    while client.is_handshaking() {
        client.complete_io(&mut tcp).unwrap_or_else(|e| panic!("{backend}: the handshake: {e}"));
    }
    let conn = Arc::new(Mutex::new(client));
    let writer = {
        let (conn, mut tcp) = (conn.clone(), tcp.try_clone().unwrap());
        std::thread::spawn(move || {
            for at in (0..TOTAL).step_by(16 << 10) {
                let piece = Rng::new(at as u64).bytes((16 << 10).min(TOTAL - at));
                let wire = {
                    let mut c = conn.lock().unwrap();
                    c.writer().write_all(&piece).unwrap();
                    let mut wire = Vec::new();
                    while c.wants_write() {
                        c.write_tls(&mut wire).unwrap();
                    }
                    wire
                };
                tcp.write_all(&wire).expect("sending to the server");
            }
        })
    };
    let mut tcp_in = tcp;
    let (mut got, mut buf) = (Vec::with_capacity(TOTAL), vec![0u8; 64 << 10]);
    while got.len() < TOTAL {
        let n = tcp_in.read(&mut buf).expect("reading the echo");
        assert!(n > 0, "{backend}: EOF after {} of {TOTAL} bytes", got.len());
        let mut c = conn.lock().unwrap();
        // read_tls takes at most a record's worth at a time.
        let mut wire = &buf[..n];
        while !wire.is_empty() {
            c.read_tls(&mut wire).unwrap();
            c.process_new_packets().unwrap_or_else(|e| panic!("{backend}: the server's records: {e}"));
            let _ = c.reader().read_to_end(&mut got);
        }
        drop(c);
        std::thread::sleep(Duration::from_micros(500)); // slow: ~128 MB/s at most
    }
    writer.join().expect("the writer");
    let want: Vec<u8> =
        (0..TOTAL).step_by(16 << 10).flat_map(|at| Rng::new(at as u64).bytes((16 << 10).min(TOTAL - at))).collect();
    assert!(got == want, "{backend}: the echo differs from what was sent");
    let grew = peak.stop().saturating_sub(idle);
    eprintln!("{backend}: RSS {idle} bytes idle, grew {grew} for {TOTAL} echoed over TLS");
    assert!(grew < GROWTH_BOUND, "{backend}: RSS grew {grew} bytes for {TOTAL} echoed; the bound is {GROWTH_BOUND}");
    drop(serve);
}

fn tls_client(cert: &Path) -> ClientConnection {
    let identity = std::fs::read_to_string(cert).expect("the certificate");
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for der in rustls::pki_types::CertificateDer::pem_slice_iter(identity.as_bytes()) {
        roots.add(der.expect("PEM")).expect("a root");
    }
    let config = ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap()).expect("a client")
}

/// TLS termination: `serve --proto proxy --tls-self-signed` in front of a
/// plaintext echo server. 1 MiB sent over TLS comes back intact through
/// both, and the upstream saw exactly as many bytes in the clear.
fn a_proxy_terminates_tls_in_front_of_a_plaintext_upstream(backend: &str) {
    const TOTAL: usize = 1 << 20;
    let upstream = Serve::start(backend, &["--proto", "echo"]);
    let dir = tempdir::Dir::new();
    let (up, folder) = (upstream.addr.to_string(), dir.path().to_str().unwrap());
    let proxy = Serve::start(backend, &["--proto", "proxy", "--upstream", &up, "--tls-self-signed", folder]);
    let mut tls = rustls::StreamOwned::new(tls_client(&dir.path().join("cert.pem")), proxy.connect());
    tls.sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let want = Rng::new(7).bytes(TOTAL);
    let mut got = vec![0u8; TOTAL];
    for (piece, back) in want.chunks(64 << 10).zip(got.chunks_mut(64 << 10)) {
        tls.write_all(piece).unwrap_or_else(|e| panic!("{backend}: sending over TLS: {e}"));
        tls.read_exact(back).unwrap_or_else(|e| panic!("{backend}: the echo through the proxy: {e}"));
    }
    assert!(got == want, "{backend}: the echo through the TLS proxy differs from what was sent");
    drop(tls);
    let (proxied, _) = proxy.stop();
    let (echoed, _) = upstream.stop();
    assert_eq!(proxied["tls"]["full_handshakes"], 1, "{backend}: {proxied}");
    assert_eq!(echoed["bytes_in"], TOTAL as u64, "{backend}: the upstream saw plaintext: {echoed}");
    assert!(echoed.get("tls").is_none(), "{backend}: the upstream speaks plaintext: {echoed}");
}

/// `iomux load --tls-ca` against the TLS echo server: every echo checked,
/// with sessions resumed and with a full handshake on every connection;
/// and a load that does not trust the server's certificate fails.
fn iomux_load_speaks_tls_resumed_or_full(backend: &str) {
    let _busy = busy();
    let (serve, cert, dir) = tls_serve(backend, "echo");
    let ca = cert.to_str().unwrap();
    for extra in [&[][..], &["--tls-full-handshakes", "--reconnect", "0"][..]] {
        let mut args = vec!["--backend", backend, "--conns", "8", "--requests", "2000", "--tls-ca", ca];
        args.extend_from_slice(extra);
        let run = load(serve.addr, &args);
        assert!(run.status.success(), "{backend} {extra:?}: {}", run.output);
        assert_eq!(run.report["echoes"], 2000, "{backend} {extra:?}: {}", run.report);
        assert_eq!(run.report["errors"]["total"], 0, "{backend} {extra:?}: {}", run.report);
    }
    // Another certificate: the handshake fails, the load says so.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let stranger = iomux_tls::certs::self_signed(&["localhost"]).unwrap();
    std::fs::write(other.join("cert.pem"), stranger.chain_pem).unwrap();
    let untrusted = other.join("cert.pem");
    let args = ["--backend", backend, "--conns", "2", "--requests", "10", "--tls-ca", untrusted.to_str().unwrap()];
    let run = load(serve.addr, &args);
    assert!(!run.status.success(), "{backend}: a load that trusts another certificate must fail: {}", run.output);
    drop(serve);
}
