//! E8's cells: a server and a load in the namespace pair, each under one
//! fault profile, and what the kernel reclaims after.

use super::*;
use crate::lab::rig::lan;
use crate::lab::rig::load_child::LoadChild;
use anyhow::bail;

/// Waits up to `limit` for the load to end, then reads its result; None
/// when it had to be killed (its own --timeout ends a stalled run: this
/// limit only catches a load that hangs).
fn finish(mut load: LoadChild, limit: Duration) -> CliResult<Option<LoadResult>> {
    if load.wait(limit, |_| {})?.is_none() {
        eprintln!("faults: iomux load did not end within {} s: killed, counted as hung", limit.as_secs());
        return Ok(None);
    }
    Ok(Some(load.result().map_err(anyhow::Error::msg)?))
}

/// Sockets process `pid` and its children (`--procs`' workers) hold now.
pub(super) fn sockets(pid: u32) -> usize {
    let own = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.to_string_lossy().starts_with("socket:"))
            .count()
    });
    own + children(pid).into_iter().map(sockets).sum::<usize>()
}

/// How soon a server with `--keepalive k` has closed a connection whose
/// peer vanished.
pub(super) fn reclaimed_within(k: u16) -> Duration {
    Keepalive::after(Duration::from_secs(u64::from(k))).reclaimed_within()
}

/// Polls `count` until it is at most `target` or `limit` passes: the
/// seconds it took (the limit if it never got there) and what was left.
pub(super) fn wait_down(count: impl Fn() -> usize, target: usize, limit: Duration) -> (f64, u64) {
    let start = Instant::now();
    loop {
        let now = count();
        if now <= target {
            return (start.elapsed().as_secs_f64(), 0);
        }
        if start.elapsed() > limit {
            return (limit.as_secs_f64(), (now - target) as u64);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn retransmits(net: &Net) -> CliResult<u64> {
    Ok(net.retransmits(Side::Server)? + net.retransmits(Side::Client)?)
}

pub(super) fn server_flags(keepalive: u16) -> Vec<String> {
    let mut flags = vec!["--keepalive".to_string(), keepalive.to_string()];
    flags.extend(lan::server_flags());
    flags
}

/// Echo through the profile's faults: every byte checked, the longest
/// echo held against the profile's bound.
pub(super) fn echo_cell(net: &Net, p: &Params, arm: Arm) -> CliResult<Sample> {
    let backend = arm.backend;
    // With keepalive, as deployed: a connection the faults left half-open
    // (a reset that reached only the client) is reclaimed too. Its user
    // timeout must outlast the retransmissions the profile explains, or
    // the server would give up on connections TCP recovers (under 5%
    // loss, --keepalive 1's 4 s ended a connection in 2 of 36 cells).
    let bound = stall_bound_s(arm.profile, p, 0.0);
    let keepalive = (p.keepalive_s..=600).find(|&k| reclaimed_within(k).as_secs_f64() > bound).unwrap_or(600);
    let reclaim_limit = reclaimed_within(keepalive) * 3;
    let server = ServerChild::start_in(net, backend, "echo", &server_flags(keepalive))?;
    let own = sockets(server.pid);
    let mut args = server.load_args(cell::LOAD_BACKEND, cell::cpus().1);
    args.conns = p.conns;
    args.per_conn = Some(p.per_conn);
    args.msg_size = msg_size(arm.profile, p);
    if arm.profile == Profile::Resets {
        // As a client would: a reset connection is replaced and its
        // unanswered message sent again (counted, and in its latency).
        args.reconnect = RESET_RECONNECTS;
    }
    // Long enough to tell a stall the bound explains from one it does not.
    args.timeout = STALL_S.max(bound + 5.0);
    let before = retransmits(net)?;
    let Some(result) = finish(lan::load(net, &args)?, Duration::from_secs(600))? else {
        return Ok(Sample { hung: 1, ..Sample::default() });
    };
    let retrans = retransmits(net)?.saturating_sub(before);
    let reclaim = wait_down(|| sockets(server.pid), own, reclaim_limit.max(Duration::from_secs(10)));
    let mut sample = echoed(&result);
    net.check_delay_lines()?;
    sample.delay_line_drops = net.delay_line_drops()?;
    // The slowest ordinary echo: the 99th percentile, or under loss the
    // median (there, the 99th is a retransmission already).
    let ordinary_us = match arm.profile {
        Profile::Loss1 | Profile::Loss5 => sample.p50_us,
        _ => sample.p99_us,
    };
    let bound = stall_bound_s(arm.profile, p, ordinary_us.unwrap_or(0.0) / 1e6);
    sample.stall_bound_s = Some(bound);
    sample.stalled = sample.max_us.is_some_and(|us| us / 1e6 > bound) as u64;
    with_server(server, retrans, reclaim, sample)
}

/// `rest` with the cell's retransmits and reclaim time, and the server's
/// CPU and vanished count once it is stopped.
pub(super) fn with_server(
    server: ServerChild,
    retransmits: u64,
    reclaim: (f64, u64),
    rest: Sample,
) -> CliResult<Sample> {
    let stats = server.stop()?.typed;
    let (reclaim_s, left_open) = reclaim;
    Ok(Sample {
        retransmits,
        server_cpu_s: Some(stats.cpu_s()),
        vanished: stats.vanished,
        reclaim_s,
        left_open,
        ..rest
    })
}

/// What an echo load's result says: echoes, checked bytes, errors by
/// name, latency.
pub(super) fn echoed(result: &LoadResult) -> Sample {
    let latency = |f: fn(&crate::load::result::Latency) -> f64| result.latency.as_ref().map(f);
    let e = &result.errors;
    Sample {
        echoes: result.echoes,
        bytes_checked: result.echo_bytes,
        mismatches: e.mismatches,
        closed_early: e.unexpected_closes,
        resets: e.resets,
        reconnects: e.reconnects,
        unanswered: e.unanswered,
        connect_errors: e.connect.values().sum(),
        p50_us: latency(|l| l.p50_us),
        p99_us: latency(|l| l.p99_us),
        p999_us: latency(|l| l.p999_us),
        max_us: latency(|l| l.max_us),
        ..Sample::default()
    }
}

/// A load holding `p.vanishing` idle connections to `server`, started
/// and waited for until the server has accepted them all.
pub(super) fn hold(
    net: &Net,
    p: &Params,
    server: &ServerChild,
    backend: Backend,
    keepalive: u16,
) -> CliResult<LoadChild> {
    let mut args = server.load_args(backend, cell::cpus().1);
    args.procs = u16::try_from(procs(backend, p.vanishing)).unwrap_or(u16::MAX);
    args.conns = 0;
    args.idle = p.vanishing;
    args.duration = Some(3600.0);
    args.keepalive = keepalive;
    let own = sockets(server.pid);
    let load = lan::load(net, &args)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while sockets(server.pid) < own + p.vanishing {
        if Instant::now() > deadline || !std::path::Path::new(&format!("/proc/{}", server.pid)).exists() {
            drop(load);
            bail!(
                "the server accepted only {} of {} connections in 120 s (or died)",
                sockets(server.pid).saturating_sub(own),
                p.vanishing
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(load)
}

/// The clients vanish: every TCP packet in their namespace dropped, then
/// they close; the server (--keepalive) must close every connection.
pub(super) fn clients_vanish(net: &Net, p: &Params, backend: Backend) -> CliResult<Sample> {
    let mut flags = server_flags(p.keepalive_s);
    flags.extend(["--procs".into(), procs(backend, p.vanishing).to_string()]);
    let server = ServerChild::start_in(net, backend, "echo", &flags)?;
    let own = sockets(server.pid);
    let load = hold(net, p, &server, cell::LOAD_BACKEND, 0)?;
    let before = retransmits(net)?;
    net.set_faults(Side::Client, None, Some(DROP_ALL), None)?;
    drop(load); // the clients close: their FIN is dropped
    let limit = Duration::from_secs_f64(p.reclaim_bound_s * 3.0);
    let reclaim = wait_down(|| sockets(server.pid), own, limit);
    let retrans = retransmits(net)?.saturating_sub(before);
    with_server(server, retrans, reclaim, Sample::default())
}

/// The server vanishes: every TCP packet in its namespace dropped, then it
/// dies; the load (--keepalive) must close every connection and end.
/// The arm's backend is the load's: the server, killed, runs epoll.
pub(super) fn server_vanishes(net: &Net, p: &Params, backend: Backend) -> CliResult<Sample> {
    let server = ServerChild::start_in(net, Backend::Epoll, "echo", &server_flags(0))?;
    let load = hold(net, p, &server, backend, p.keepalive_s)?;
    let before = retransmits(net)?;
    net.set_faults(Side::Server, None, Some(DROP_ALL), None)?;
    drop(server); // killed: the host is gone
    let limit = Duration::from_secs_f64(p.reclaim_bound_s * 3.0);
    let (reclaim_s, left_open) = wait_down(|| sockets(load.pid()), 0, limit);
    let retrans = retransmits(net)?.saturating_sub(before);
    let Some(result) = finish(load, Duration::from_secs(10))? else {
        return Ok(Sample { hung: 1, reclaim_s, left_open, ..Sample::default() });
    };
    Ok(Sample {
        closed_early: result.errors.unexpected_closes,
        resets: result.errors.resets,
        retransmits: retrans,
        vanished: result.errors.vanished,
        reclaim_s,
        left_open,
        ..Sample::default()
    })
}
