//! nginx as E6's reference server: one worker, its own configuration in
//! a folder of its own, pinned to the server CPU, stopped and reaped
//! whatever happens (a value owns it; dropping it kills it).

use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Connections nginx's one worker accepts in plaintext.
const PLAIN_CONNS: u32 = 4096;

/// nginx over TLS, for E6's HTTPS cells: the lab's certificate; TLS 1.3
/// with AES-128-GCM and X25519 only (as iomux is told); resumption by
/// tickets, or none.
pub struct NginxTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub resumption: bool,
    /// Log every request's `$ssl_session_reused`, so that full and resumed
    /// handshakes are counted when each request has its own connection (a
    /// buffered log of 2 bytes a request: one write per 32,768 requests).
    pub log_handshakes: bool,
    /// Connections the worker must hold at once.
    pub conns: u32,
}

/// Handshakes a server completed: counted by nginx's log, or by iomux's
/// stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Handshakes {
    pub full: u64,
    pub resumed: u64,
}

/// The configuration: the plaintext response from a `return 200`, and
/// keep-alive without a request limit (nginx's default of 1000 requests
/// per connection would make the client reconnect every 1000 requests,
/// which iomux is never asked to do). Requests are logged only over TLS,
/// to count resumed handshakes.
pub fn config(prefix: &Path, addr: SocketAddr, tls: Option<&NginxTls>) -> String {
    let p = prefix.display();
    let conns = tls.map_or(PLAIN_CONNS, |t| t.conns.max(PLAIN_CONNS));
    let logging = match tls {
        Some(t) if t.log_handshakes => {
            format!("log_format reuse '$ssl_session_reused'; access_log {p}/reuse.log reuse buffer=64k;")
        }
        _ => "access_log off;".to_string(),
    };
    let (listen, tls_lines) = match tls {
        None => (addr.to_string(), String::new()),
        Some(t) => (
            format!("{addr} ssl"),
            format!(
                "\x20   ssl_certificate {};\n\
                 \x20   ssl_certificate_key {};\n\
                 \x20   ssl_protocols TLSv1.3;\n\
                 \x20   ssl_ecdh_curve X25519;\n\
                 \x20   ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;\n\
                 \x20   ssl_session_tickets {};\n\
                 \x20   ssl_session_cache off;\n\
                 {}",
                t.cert.display(),
                t.key.display(),
                if t.resumption { "on" } else { "off" },
                // OpenSSL 3.0 still sends two TLS 1.3 tickets (stateful,
                // never usable) with tickets and the cache off; the client
                // would offer them back. iomux sends none.
                if t.resumption { "" } else { "\x20   ssl_conf_command NumTickets 0;\n" }
            ),
        ),
    };
    // As many as this process may have (its children inherit the limit).
    let hard = crate::os::nofile_limit().1.min(u64::from(u32::MAX)) as u32;
    let nofile = (2 * conns + 64).min(hard);
    format!(
        "# Written by iomux bench http.\n\
         worker_processes 1;\n\
         daemon off;\n\
         master_process on;\n\
         error_log {p}/error.log warn;\n\
         pid {p}/nginx.pid;\n\
         worker_rlimit_nofile {nofile};\n\
         events {{ worker_connections {conns}; }}\n\
         http {{\n\
         \x20 {logging}\n\
         \x20 keepalive_requests 1000000000;\n\
         \x20 client_body_temp_path {p}/body;\n\
         \x20 proxy_temp_path {p}/proxy;\n\
         \x20 fastcgi_temp_path {p}/fastcgi;\n\
         \x20 uwsgi_temp_path {p}/uwsgi;\n\
         \x20 scgi_temp_path {p}/scgi;\n\
         \x20 server {{\n\
         \x20   listen {listen};\n\
         {tls_lines}\
         \x20   location = /plaintext {{ default_type text/plain; return 200 \"Hello, World!\"; }}\n\
         \x20 }}\n\
         }}\n"
    )
}

pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
    prefix: PathBuf,
}

impl Nginx {
    /// Starts `program` with its own configuration on a free loopback port,
    /// pinned to `cpu`, and waits until it answers (over TLS: until it
    /// accepts connections; the caller's probe speaks TLS).
    pub fn start(program: &Path, cpu: Option<usize>, tls: Option<&NginxTls>) -> CliResult<Nginx> {
        use std::os::unix::process::CommandExt;
        let prefix = fresh_dir()?;
        // A free port now; nginx binds it a moment later (nothing else here
        // takes ports in between).
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for nginx")?;
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, config(&prefix, addr, tls)).with_context(|| format!("writing {}", conf.display()))?;
        let mut cmd = Command::new(program);
        cmd.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&prefix)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(cpu) = cpu {
            // SAFETY: sched_setaffinity is async-signal-safe and touches no
            // state of the parent's; the worker nginx forks inherits it.
            unsafe {
                cmd.pre_exec(move || crate::os::pin_to_cpu(cpu));
            }
        }
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&prefix);
                return Err(e).with_context(|| format!("cannot start {}", program.display()));
            }
        };
        let mut nginx = Nginx { child, addr, prefix };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                bail!("nginx exited at start with {status}: {}", nginx.error_log());
            }
            let ready = match tls {
                None => answers_plaintext(addr),
                Some(_) => {
                    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map(drop).map_err(|e| e.to_string())
                }
            };
            // Over TLS the master's socket accepts before a worker is
            // forked: its worker must be there before `pids` is read.
            let ready = ready.and_then(|()| match crate::lab::rig::child::children(nginx.child.id()).is_empty() {
                true => Err("no worker yet".to_string()),
                false => Ok(()),
            });
            match ready {
                Ok(()) => return Ok(nginx),
                Err(e) if Instant::now() > deadline => {
                    bail!("nginx does not answer on {addr} within 10 s: {e}; {}", nginx.error_log())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Master and worker processes.
    pub fn pids(&self) -> Vec<u32> {
        let master = self.child.id();
        let mut pids = vec![master];
        pids.extend(crate::lab::rig::child::children(master));
        pids
    }

    fn error_log(&self) -> String {
        let text = std::fs::read_to_string(self.prefix.join("error.log")).unwrap_or_default();
        text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("error.log is empty").to_string()
    }

    /// SIGQUIT (nginx's graceful stop), then SIGKILL after 5 s.
    pub fn stop(mut self) -> CliResult<()> {
        self.quit()
    }

    fn quit(&mut self) -> CliResult<()> {
        if crate::os::signal_and_wait(&mut self.child, rustix::process::Signal::QUIT, Duration::from_secs(5)) {
            return Ok(());
        }
        Err(anyhow!("nginx did not stop within 5 s of SIGQUIT; killed. {}", self.error_log()))
    }

    /// Stops nginx (its log is flushed at a graceful stop) and counts the
    /// handshakes of the requests it logged over TLS: `r` resumed, `.` not.
    pub fn stop_counting(mut self) -> CliResult<Handshakes> {
        self.quit()?;
        let log = self.prefix.join("reuse.log");
        let text = std::fs::read_to_string(&log).with_context(|| format!("reading nginx's log {}", log.display()))?;
        Ok(count_reused(&text))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // The workers end with their master (nginx's own design).
            for pid in crate::lab::rig::child::children(self.child.id()) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.prefix);
    }
}

/// A new folder for one nginx's configuration, pid file and logs; readable
/// by the worker, which runs as another user when the master is root.
fn fresh_dir() -> CliResult<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir =
        std::env::temp_dir().join(format!("iomux-nginx-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Handshakes in a log of `$ssl_session_reused`, one line per request.
fn count_reused(text: &str) -> Handshakes {
    let mut n = Handshakes::default();
    for line in text.lines() {
        match line.trim() {
            "r" => n.resumed += 1,
            "." => n.full += 1,
            _ => {}
        }
    }
    n
}

/// Whether `addr` answers `GET /plaintext` with TechEmpower's body.
pub fn answers_plaintext(addr: SocketAddr) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    s.write_all(b"GET /plaintext HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    // Until the body is whole: a server may keep the connection open (the
    // C floor reads no header, Connection: close included).
    let mut answer = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return is_plaintext_answer(&answer),
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            // What came, if anything, says more than the timeout.
            Err(e) if answer.is_empty() => return Err(format!("read: {e}")),
            Err(_) => return is_plaintext_answer(&answer),
        }
        if is_plaintext_answer(&answer).is_ok() {
            return Ok(());
        }
    }
}

/// Whether `answer` is TechEmpower's answer to `GET /plaintext`.
pub fn is_plaintext_answer(answer: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(answer);
    if text.starts_with("HTTP/1.1 200 OK\r\n") && text.ends_with("\r\n\r\nHello, World!") {
        Ok(())
    } else {
        Err(format!("unexpected answer to GET /plaintext: {text:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_serves_plaintext_from_a_return() {
        let c = config(Path::new("/tmp/x"), "127.0.0.1:8080".parse().unwrap(), None);
        assert!(c.contains("worker_processes 1;") && c.contains("access_log off;"));
        assert!(c.contains("listen 127.0.0.1:8080;"));
        assert!(c.contains("return 200 \"Hello, World!\";"));
        assert!(c.contains("pid /tmp/x/nginx.pid;"));
        assert!(c.contains("worker_connections 4096;") && !c.contains("ssl"));
        assert_eq!(c.matches('{').count(), c.matches('}').count());
    }

    #[test]
    fn over_tls_it_pins_the_suite_and_logs_resumption() {
        let tls = NginxTls {
            cert: "/c.pem".into(),
            key: "/k.pem".into(),
            resumption: false,
            log_handshakes: true,
            conns: 10_256,
        };
        let c = config(Path::new("/tmp/x"), "127.0.0.1:8443".parse().unwrap(), Some(&tls));
        for line in [
            "listen 127.0.0.1:8443 ssl;",
            "ssl_certificate /c.pem;",
            "ssl_certificate_key /k.pem;",
            "ssl_protocols TLSv1.3;",
            "ssl_ecdh_curve X25519;",
            "ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;",
            "ssl_session_tickets off;",
            "worker_connections 10256;",
            "ssl_conf_command NumTickets 0;",
            "access_log /tmp/x/reuse.log reuse buffer=64k;",
        ] {
            assert!(c.contains(line), "{line} in {c}");
        }
        assert_eq!(c.matches('{').count(), c.matches('}').count());
        assert_eq!(count_reused("r\n.\nr\n\n"), Handshakes { full: 1, resumed: 2 });
    }
}
