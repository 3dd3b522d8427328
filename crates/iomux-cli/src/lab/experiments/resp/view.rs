//! E7's page: its tables, intro and plot.

use super::*;
use crate::lab::experiments::serving::fixed;

impl Shown for Resp {
    fn view(env: &Envelope<Params, Arm, Run>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View { intro: vec![intro(p)], ..View::default() };
        for why in &p.missing {
            view.intro.push(format!("Not run: {why}."));
        }
        view.intro.extend(p.notes.iter().cloned());
        for &scenario in &p.scenarios {
            for &test in &p.tests {
                for &depth in &p.depths {
                    view.tables.push(table(env, &mut view.notes, Arm { server: Server::Redis, test, depth, scenario }));
                }
            }
        }
        if !env.takes.is_empty() {
            view.svg = Some(svg(env)?);
        }
        Ok(view)
    }
}

/// The table of one test, depth and scenario; `redis` names them.
pub(super) fn table(env: &Envelope<Params, Arm, Run>, notes: &mut Vec<String>, redis: Arm) -> TableView {
    let p = &env.params;
    let mut footnote = |why: &str| {
        let mut v = View { notes: std::mem::take(notes), ..View::default() };
        let mark = v.footnote(why);
        *notes = v.notes;
        mark
    };
    let reference = env.estimate(&redis, |r| r.report.requests_per_sec);
    let mut t = TableView::new(
        format!("{} -P {}, {}", redis.test.to_string().to_uppercase(), redis.depth, redis.scenario),
        &[
            "server",
            "runs",
            "requests/s",
            "/ redis",
            "server CPU us/req",
            "server CPU",
            "client CPU",
            "p50 us",
            "p99 us",
            "errors",
            "syscalls/req",
        ],
        Vec::new(),
    );
    for &server in &p.servers {
        let arm = Arm { server, ..redis };
        // Results of before 2026-12-07 have the floor at -P 1 only.
        if server == Server::Floor && !env.takes.iter().any(|t| t.arm == arm) {
            continue;
        }
        let quota = (arm.scenario == Scenario::Bound).then_some(crate::lab::rig::quota::BOUND_SHARE);
        let mut row = serving::request_row(env, (&arm, server.to_string(), quota), reference, SATURATED, &mut footnote);
        let med = |f: fn(&Run) -> f64| env.estimate(&arm, f).map(|e| e.median);
        row.extend([
            fixed(med(|r| r.report.p50_us), 0),
            fixed(med(|r| r.report.p99_us), 0),
            env.kept(&arm).map(|r| r.errors).sum::<u64>().to_string(),
            fixed(med(|r| r.syscalls_per_request.unwrap_or(f64::NAN)), 3),
        ]);
        t.rows.push(row);
    }
    t
}

pub(super) fn intro(p: &Params) -> String {
    let placement = match p.pinned {
        Some((s, c)) => format!("Every server runs pinned to CPU {s}, redis-benchmark to CPU {c}."),
        None => "This machine has one CPU, so nothing is pinned.".to_string(),
    };
    format!(
        "{placement} Servers: `iomux serve --proto resp --backend B` (one loop) and redis-server (`--save '' \
         --appendonly no --io-threads 1`). Client: `redis-benchmark -c {c} -n N -P D -t TEST --csv` with N = {n} \
         x D (one key, 3-byte values; GET's key is set first). The floor: a C server (`iomux peer --server \
         c-resp-floor`) that answers each request with a canned reply and does nothing else, so it spends only what \
         the kernel does (syscalls, TCP over loopback, sleeping and waking). Each run gets a fresh server. \
         Scenarios: open (the server has its CPU to itself) and bound (the server in a cgroup CPU quota of {share:.0}% \
         of one CPU, the same for every server, so the client has headroom and the requests/s measure the server). \
         Server CPU: user + system time of the server process over the client's run, per request; CPU shares are of \
         one CPU over the run. A side at {sat:.0}% or more of its CPU sets the pace. Syscalls/request (iomux only): \
         the server's own counters over its life over its replies. Errors: error replies the server counted \
         (redis: INFO's total_error_replies). {r} rounds first, each in another order of the cells, then more for \
         undecided claims; cells: median ± half its 95% interval.",
        c = p.conns,
        n = p.requests_at(1),
        share = p.bound_share * 100.0,
        sat = p.saturated_at * 100.0,
        r = p.rounds.first_rounds,
    )
}

pub(super) fn svg(env: &Envelope<Params, Arm, Run>) -> CliResult<String> {
    let p = &env.params;
    let mut groups = Vec::new();
    for &scenario in &p.scenarios {
        for &test in &p.tests {
            for &depth in &p.depths {
                groups.push((
                    format!("{} -P {depth} {scenario}", test.to_string().to_uppercase()),
                    (test, depth, scenario),
                ));
            }
        }
    }
    let arm = |server, (test, depth, scenario)| Arm { server, test, depth, scenario };
    let what = "E7: RESP requests/s by redis-benchmark, 50 connections";
    serving::requests_bars((env, &p.servers), groups, arm, (what, "test, pipelining depth, scenario"))
}
