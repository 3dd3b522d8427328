//! E7's programs nobody here wrote: redis-server, the reference (no
//! persistence, one I/O thread, pinned), and redis-benchmark, the client
//! (pinned to the other CPU), its CSV report parsed.

use crate::lab::rig::anchors::clients::Tool;
use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A RESP request as redis-cli would send it.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n{a}\r\n", a.len()).into_bytes());
    }
    out
}

/// Sends one command and reads one reply: a simple string or a bulk
/// string (all that PING and INFO answer).
pub fn ask(addr: SocketAddr, args: &[&str]) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    s.write_all(&command(args)).map_err(|e| format!("send: {e}"))?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        let n = s.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!("the server closed after {} bytes", reply.len()));
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(simple) = text.strip_prefix('+').and_then(|t| t.strip_suffix("\r\n")) {
            return Ok(simple.to_string());
        }
        if let Some(error) = text.strip_prefix('-').and_then(|t| t.strip_suffix("\r\n")) {
            return Err(format!("error reply: {error}"));
        }
        if let Some((len, body)) = text.strip_prefix('$').and_then(|t| t.split_once("\r\n")) {
            let len: usize = len.parse().map_err(|_| format!("bad bulk length in {text:?}"))?;
            if body.len() >= len + 2 {
                return Ok(body[..len].to_string());
            }
        }
    }
}

/// `total_error_replies` of INFO stats: error replies since start.
pub fn error_replies(addr: SocketAddr) -> Result<u64, String> {
    let info = ask(addr, &["INFO", "stats"])?;
    info.lines()
        .find_map(|l| l.strip_prefix("total_error_replies:")?.trim().parse().ok())
        .ok_or_else(|| "INFO stats has no total_error_replies".to_string())
}

/// redis-server on a free loopback port, pinned, stopped and reaped
/// whatever happens.
pub struct RedisServer {
    child: Child,
    pub addr: SocketAddr,
}

impl RedisServer {
    /// The flags: no persistence, no protected mode, one I/O thread.
    fn args(addr: SocketAddr) -> Vec<String> {
        [
            "--port",
            &addr.port().to_string(),
            "--bind",
            &addr.ip().to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--io-threads",
            "1",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ]
        .map(String::from)
        .to_vec()
    }

    pub fn start(program: &Path, cpu: Option<usize>) -> CliResult<RedisServer> {
        use std::os::unix::process::CommandExt;
        // A free port now; redis binds it a moment later.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for redis-server")?;
        let mut cmd = Command::new(program);
        cmd.args(Self::args(addr)).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        // Its working directory: where it would write a dump (it writes none).
        cmd.current_dir(std::env::temp_dir());
        if let Some(cpu) = cpu {
            // SAFETY: sched_setaffinity is async-signal-safe and touches no
            // state of the parent's; its threads inherit the mask.
            unsafe {
                cmd.pre_exec(move || crate::os::pin_to_cpu(cpu));
            }
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {}", program.display()))?;
        let mut redis = RedisServer { child, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = redis.child.try_wait() {
                let mut said = String::new();
                if let Some(mut e) = redis.child.stderr.take() {
                    let _ = e.read_to_string(&mut said);
                }
                bail!("redis-server exited at start with {status}: {}", said.trim());
            }
            match ask(addr, &["PING"]) {
                Ok(pong) if pong == "PONG" => return Ok(redis),
                Ok(other) => bail!("redis-server answered PING with {other:?}"),
                Err(e) if Instant::now() > deadline => {
                    bail!("redis-server does not answer on {addr} within 10 s: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM (redis's clean stop, nothing to save), SIGKILL after 5 s.
    pub fn stop(mut self) -> CliResult<()> {
        if crate::os::signal_and_wait(&mut self.child, rustix::process::Signal::TERM, Duration::from_secs(5)) {
            return Ok(());
        }
        Err(anyhow!("redis-server did not stop within 5 s of SIGTERM; killed"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What one redis-benchmark run reported, for one test.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub requests_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
}

/// The arguments of one run: `test` (set, get, incr) by `conns`
/// connections, `depth` requests pipelined, `requests` in all; one key
/// (redis-benchmark's default, `key:__rand_int__` taken literally
/// without `-r`) and 3-byte values, as its usual invocation runs.
pub fn args(addr: SocketAddr, test: &str, conns: u32, depth: u32, requests: u64) -> Vec<String> {
    [
        "-h".into(),
        addr.ip().to_string(),
        "-p".into(),
        addr.port().to_string(),
        "-c".into(),
        conns.to_string(),
        "-n".into(),
        requests.to_string(),
        "-P".into(),
        depth.to_string(),
        "-t".into(),
        test.into(),
        "--csv".into(),
        "--precision".into(),
        "3".into(),
    ]
    .to_vec()
}

/// Runs redis-benchmark pinned to `cpu` (killed after `limit`); returns
/// its report and the CPU it used.
pub fn run(program: &Path, args: &[String], cpu: Option<usize>, limit: Duration) -> CliResult<(Report, Duration)> {
    let (out, used) = crate::lab::rig::anchors::clients::run_pinned(program, args, cpu, limit, "redis-benchmark")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // It exits 0 even when a request failed; it says "Error" then.
    if String::from_utf8_lossy(&out.stderr).contains("Error") || stdout.contains("Error") {
        bail!("redis-benchmark: {}", crate::lab::rig::anchors::clients::first_said(&out));
    }
    let report = parse_csv(&stdout).map_err(|e| anyhow!("redis-benchmark's report: {e}\n{stdout}"))?;
    Ok((report, used))
}

/// The second line of `--csv` output:
/// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms".
pub fn parse_csv(text: &str) -> Result<Report, String> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().ok_or("no output")?.split(',').map(|f| f.trim_matches('"')).collect();
    let row: Vec<&str> = lines.next().ok_or("no result line")?.split(',').map(|f| f.trim_matches('"')).collect();
    let field = |name: &str| -> Result<f64, String> {
        let i = header.iter().position(|h| *h == name).ok_or_else(|| format!("no column {name}"))?;
        row.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| format!("no number in column {name}"))
    };
    Ok(Report {
        requests_per_sec: field("rps")?,
        p50_us: field("p50_latency_ms")? * 1e3,
        p99_us: field("p99_latency_ms")? * 1e3,
        mean_us: field("avg_latency_ms")? * 1e3,
    })
}

/// The key and value redis-benchmark's GET reads: set first, so every
/// GET finds it, as after its SET test.
pub const GET_KEY: [&str; 2] = ["key:__rand_int__", "xxx"];

/// Where redis-server and redis-benchmark are, or why not.
pub fn programs() -> Result<(std::path::PathBuf, std::path::PathBuf), String> {
    Ok((Tool::RedisServer.find()?, Tool::RedisBenchmark.find()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed by redis-benchmark 7.0.15 here.
    const CSV: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                       \"GET\",\"699300.69\",\"0.803\",\"0.216\",\"0.783\",\"1.319\",\"1.679\",\"3.215\"\n";

    #[test]
    fn the_csv_report_is_read() {
        let r = parse_csv(CSV).unwrap();
        assert_eq!(r.requests_per_sec, 699300.69);
        assert_eq!((r.p50_us.round(), r.p99_us.round(), r.mean_us.round()), (783.0, 1679.0, 803.0));
        assert!(parse_csv("\"test\",\"rps\"\n").is_err());
    }

    #[test]
    fn commands_are_multibulk_and_arguments_complete() {
        assert_eq!(command(&["INFO", "stats"]), b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n");
        let a = args("127.0.0.1:7000".parse().unwrap(), "get", 50, 16, 1000).join(" ");
        assert_eq!(a, "-h 127.0.0.1 -p 7000 -c 50 -n 1000 -P 16 -t get --csv --precision 3");
        let server = RedisServer::args("127.0.0.1:7000".parse().unwrap()).join(" ");
        assert!(server.contains("--save  --appendonly no --io-threads 1"), "{server}");
    }
}
