//! E9's cells: a proxy (and its upstream) started under the quota, and
//! the requests, bulk and many loads through it.

use super::*;
use anyhow::Context as _;

/// A proxy running for one cell.
pub(super) enum Running {
    Child(ServerChild),
    Haproxy(Haproxy),
}

impl Running {
    fn start(p: &Params, arm: &Arm, upstream: SocketAddr, maxconn: usize, cpu: Option<usize>) -> CliResult<Running> {
        let flags = ["--upstream".to_string(), upstream.to_string()];
        Ok(match arm.server {
            Proxy::Iomux(b) => Running::Child(ServerChild::start_with(b, "proxy", cpu, None, 1, &flags)?),
            Proxy::Copying(b) => {
                let flags = [&flags[..], &["--splice".to_string(), "off".to_string()]].concat();
                Running::Child(ServerChild::start_with(b, "proxy", cpu, None, 1, &flags)?)
            }
            Proxy::Floor => Running::Child(ServerChild::start_peer_with("c-relay-floor", cpu, &flags)?),
            Proxy::UringFloor => Running::Child(ServerChild::start_peer_with("uring-relay-floor", cpu, &flags)?),
            Proxy::Haproxy => {
                let program = p.haproxy.as_ref().context("haproxy not found")?;
                // Idle connections splice nothing, and the pipes would take
                // descriptors the many cell needs.
                let splice = arm.load != Load::Many;
                Running::Haproxy(Haproxy::start(program, upstream, maxconn, splice, cpu)?)
            }
        })
    }
    fn addr(&self) -> SocketAddr {
        match self {
            Running::Child(c) => c.addr,
            Running::Haproxy(h) => h.addr,
        }
    }
    fn pid(&self) -> u32 {
        match self {
            Running::Child(c) => c.pid,
            Running::Haproxy(h) => h.pid(),
        }
    }
    fn stop(self) -> CliResult<()> {
        match self {
            Running::Child(c) => c.stop().map(drop),
            Running::Haproxy(h) => h.stop(),
        }
    }
}

pub(super) fn cpu_of(pid: u32) -> Duration {
    crate::os::process_cpu(pid).unwrap_or_default()
}

/// Runs `f` with the proxy, in the quota, then stops it (whatever `f` did).
pub(super) fn with_proxy<T>(
    p: &Params,
    arm: &Arm,
    upstream: SocketAddr,
    maxconn: usize,
    f: impl FnOnce(&Running, &CpuQuota) -> Result<T, String>,
) -> Result<T, String> {
    let (server_cpu, _) = crate::lab::rig::cell::cpus();
    let quota = CpuQuota::new(BOUND_SHARE)?;
    let proxy = Running::start(p, arm, upstream, maxconn, server_cpu).map_err(crate::one_line)?;
    let result = quota.add(proxy.pid()).and_then(|()| f(&proxy, &quota));
    let stopped = proxy.stop().map_err(crate::one_line);
    let value = result?;
    stopped?;
    Ok(value)
}

pub(super) fn requests(p: &Params, arm: &Arm) -> Result<Run, String> {
    let (server_cpu, client_cpu) = crate::lab::rig::cell::cpus();
    let wrk = p.wrk.as_ref().ok_or("wrk not found")?;
    let nginx = Nginx::start(p.nginx.as_ref().ok_or("nginx not found")?, server_cpu, None).map_err(crate::one_line)?;
    let run = with_proxy(p, arm, nginx.addr, 4096, |proxy, quota| {
        answers_plaintext(proxy.addr()).map_err(|e| format!("{}: through the proxy: {e}", arm.server))?;
        let url = format!("http://{}/plaintext", proxy.addr());
        let args = clients::args(Client::Wrk, &url, p.conns, 1, p.seconds, None);
        let before = cpu_of(proxy.pid());
        let (report, client) = clients::run(Client::Wrk, wrk, &args, client_cpu, p.seconds).map_err(crate::one_line)?;
        let used = cpu_of(proxy.pid()).saturating_sub(before);
        Ok(Run {
            rate: Some(report.requests_per_sec),
            cost: used.as_secs_f64() * 1e6 / report.requests.max(1) as f64,
            proxy_util: Some(used.as_secs_f64() / report.seconds),
            client_util: Some(client.as_secs_f64() / report.seconds),
            throttled_periods: quota.throttled_periods(),
            report: Some(report),
        })
    });
    nginx.stop().map_err(crate::one_line)?;
    run
}

pub(super) fn bulk(p: &Params, arm: &Arm) -> Result<Run, String> {
    let (_, client_cpu) = crate::lab::rig::cell::cpus();
    let sink = ServerChild::start_with(Backend::Epoll, "sink", client_cpu, None, 1, &[]).map_err(crate::one_line)?;
    let bytes = u64::from(p.bulk_mib) << 20;
    let run = with_proxy(p, arm, sink.addr, 4096, |proxy, quota| {
        let addr = proxy.addr();
        let sender = std::thread::spawn(move || -> Result<Duration, String> {
            if let Some(cpu) = client_cpu {
                crate::os::pin_to_cpu(cpu).map_err(|e| format!("pinning the sender: {e}"))?;
            }
            let mut s = TcpStream::connect(addr).map_err(|e| format!("connect to the proxy: {e}"))?;
            let chunk = vec![0x5a_u8; 256 << 10];
            let started = Instant::now();
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                s.write_all(&chunk[..n]).map_err(|e| format!("sending through the proxy: {e}"))?;
                left -= n as u64;
            }
            // The proxy's end of input, then its own: every byte went through.
            s.shutdown(std::net::Shutdown::Write).map_err(|e| e.to_string())?;
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).map_err(|e| format!("waiting for the proxy's end: {e}"))?;
            Ok(started.elapsed())
        });
        let before = cpu_of(proxy.pid());
        let took = sender.join().map_err(|_| "the sender panicked".to_string())??;
        let used = cpu_of(proxy.pid()).saturating_sub(before);
        Ok(Run {
            rate: Some(bytes as f64 / 1e6 / took.as_secs_f64()),
            cost: used.as_secs_f64() / (bytes as f64 / 1e9),
            report: None,
            proxy_util: Some(used.as_secs_f64() / took.as_secs_f64()),
            client_util: None,
            throttled_periods: quota.throttled_periods(),
        })
    });
    let stats = sink.stop().map_err(crate::one_line)?.typed;
    let run = run?;
    if stats.bytes_in != bytes {
        return Err(format!("the sink got {} bytes of {bytes}", stats.bytes_in));
    }
    Ok(run)
}

pub(super) fn many(p: &Params, arm: &Arm) -> Result<Run, String> {
    let (_, client_cpu) = crate::lab::rig::cell::cpus();
    let echo = ServerChild::start_with(Backend::Epoll, "echo", client_cpu, None, 1, &[]).map_err(crate::one_line)?;
    let run = with_proxy(p, arm, echo.addr, p.many + 64, |proxy, quota| {
        let rss = || status_kib(proxy.pid(), "VmRSS:") * 1024;
        let before = rss();
        let mut conns = Vec::with_capacity(p.many);
        for i in 0..p.many {
            let mut s = TcpStream::connect(proxy.addr()).map_err(|e| format!("connection {i}: {e}"))?;
            s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
            let mut b = [0u8; 1];
            s.write_all(b"x").and_then(|()| s.read_exact(&mut b)).map_err(|e| format!("connection {i}: {e}"))?;
            conns.push(s);
        }
        // Idle now: what the proxy holds for them.
        std::thread::sleep(Duration::from_millis(200));
        let after = rss();
        drop(conns);
        Ok(Run {
            rate: None,
            cost: after.saturating_sub(before) as f64 / p.many as f64,
            report: None,
            proxy_util: None,
            client_util: None,
            throttled_periods: quota.throttled_periods(),
        })
    });
    echo.stop().map_err(crate::one_line)?;
    run
}
