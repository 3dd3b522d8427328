//! E7's cell: one server under the quota, driven by redis-benchmark.

use super::*;

pub(super) fn run_cell(p: &Params, arm: &Arm) -> Result<Run, String> {
    let Some((redis_server, benchmark)) = &p.programs else { return Err(p.missing.join("; ")) };
    let (server_cpu, client_cpu) = crate::lab::rig::cell::cpus();
    let requests = p.requests_at(arm.depth);
    let quota = match arm.scenario {
        Scenario::Open => None,
        Scenario::Bound => Some(CpuQuota::new(BOUND_SHARE)?),
    };
    let measure = |addr: std::net::SocketAddr, pid: u32| -> Result<(redis::Report, Duration, Duration), String> {
        if arm.test == Test::Get {
            redis::ask(addr, &["SET", redis::GET_KEY[0], redis::GET_KEY[1]]).map_err(|e| format!("{arm}: {e}"))?;
        }
        if let Some(q) = &quota {
            q.add(pid)?;
        }
        let args = redis::args(addr, &arm.test.to_string(), p.conns, arm.depth, requests);
        let before = crate::os::process_cpu(pid).map_err(|e| format!("the server's CPU time: {e}"))?;
        // Bounded: even at 1,000 requests/s the run ends well within it.
        let limit = Duration::from_secs(requests / 1000 + 30);
        let (report, used) = redis::run(benchmark, &args, client_cpu, limit).map_err(crate::one_line)?;
        let after = crate::os::process_cpu(pid).map_err(|e| format!("the server's CPU time: {e}"))?;
        Ok((report, after.saturating_sub(before), used))
    };
    let (report, server_used, client_used, syscalls, errors) = match arm.server {
        Server::Iomux(backend) => {
            let child = ServerChild::start_with(backend, "resp", server_cpu, None, 1, &[]).map_err(crate::one_line)?;
            let measured = measure(child.addr, child.pid);
            let stats = child.stop().map_err(crate::one_line)?.typed;
            let (report, s, c) = measured?;
            let replies = stats.resp_replies.map_or(f64::NAN, |n| n as f64);
            let syscalls = stats.syscalls_total as f64 / replies;
            (report, s, c, syscalls.is_finite().then_some(syscalls), stats.resp_errors.unwrap_or(0))
        }
        Server::Floor => {
            let child = ServerChild::start_peer("c-resp-floor", server_cpu).map_err(crate::one_line)?;
            let measured = measure(child.addr, child.pid);
            child.stop().map_err(crate::one_line)?;
            let (report, s, c) = measured?;
            (report, s, c, None, 0)
        }
        Server::Redis => {
            let server = RedisServer::start(redis_server, server_cpu).map_err(crate::one_line)?;
            let measured = measure(server.addr, server.pid());
            let errors = redis::error_replies(server.addr);
            server.stop().map_err(crate::one_line)?;
            let (report, s, c) = measured?;
            (report, s, c, None, errors?)
        }
    };
    let seconds = requests as f64 / report.requests_per_sec;
    Ok(Run {
        server_cpu_us_per_request: server_used.as_secs_f64() * 1e6 / requests as f64,
        server_util: server_used.as_secs_f64() / seconds,
        client_util: client_used.as_secs_f64() / seconds,
        syscalls_per_request: syscalls,
        errors,
        throttled_periods: quota.as_ref().and_then(CpuQuota::throttled_periods),
        requests,
        report,
    })
}
