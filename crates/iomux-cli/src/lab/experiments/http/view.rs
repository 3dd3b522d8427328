//! E6's page: its tables, intro and plot.

use super::*;
use crate::lab::experiments::serving::fixed;

impl Shown for Http {
    fn view(env: &Envelope<Params, Arm, Run>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View { intro: vec![intro(p)], ..View::default() };
        if !p.missing.is_empty() {
            view.intro.push(format!("Not run: {}; install with {INSTALL}.", p.missing.join("; ")));
        }
        let tables = p.scenarios.iter().flat_map(|&scenario| {
            CLIENTS
                .into_iter()
                .filter(move |&c| scenario == Scenario::Open || c == Client::Wrk)
                .map(move |c| (scenario, c))
        });
        for (scenario, client) in tables {
            for &depth in &p.depths {
                let nginx = env
                    .estimate(&Arm { server: Server::Nginx, client, depth, scenario }, |r| r.report.requests_per_sec);
                let wrk = client == Client::Wrk;
                let mut t = TableView {
                    caption: match scenario {
                        Scenario::Open => format!("{} depth {depth}", client.name()),
                        Scenario::Bound => format!("{} depth {depth}, every server in a 50% CPU quota", client.name()),
                    },
                    header: [
                        "server",
                        "runs",
                        "requests/s",
                        "/ nginx",
                        "server CPU us/req",
                        "server CPU",
                        "client CPU",
                        if wrk { "p50 us" } else { "mean us" },
                        if wrk { "p99 us" } else { "-" },
                        "errors",
                        "syscalls/req",
                    ]
                    .map(String::from)
                    .to_vec(),
                    rows: Vec::new(),
                };
                for &server in &p.servers {
                    let arm = Arm { server, client, depth, scenario };
                    let bound = scenario == Scenario::Bound;
                    let footnote = &mut |why: &str| view.footnote(why);
                    let mut row =
                        serving::request_row(env, (&arm, server.to_string(), bound), nginx, SATURATED, footnote);
                    let med = |f: fn(&Run) -> f64| env.estimate(&arm, f).map(|e| e.median);
                    row.extend([
                        fixed(
                            med(if wrk {
                                |r| r.report.p50_us.unwrap_or(f64::NAN)
                            } else {
                                |r| r.report.mean_us.unwrap_or(f64::NAN)
                            }),
                            0,
                        ),
                        if wrk { fixed(med(|r| r.report.p99_us.unwrap_or(f64::NAN)), 0) } else { "-".into() },
                        env.kept(&arm).map(|r| r.report.errors).sum::<u64>().to_string(),
                        fixed(med(|r| r.syscalls_per_request.unwrap_or(f64::NAN)), 3),
                    ]);
                    t.rows.push(row);
                }
                view.tables.push(t);
            }
        }
        if !env.takes.is_empty() {
            view.svg = Some(svg(env)?);
        }
        Ok(view)
    }
}

pub(super) fn intro(p: &Params) -> String {
    let placement = match p.pinned {
        Some((s, c)) => format!("Every server runs pinned to CPU {s}, the client to CPU {c}."),
        None => "This machine has one CPU, so nothing is pinned.".to_string(),
    };
    format!(
        "{placement} Servers: `iomux serve --proto http --backend B` (one loop) and nginx (`worker_processes 1`, \
         `access_log off`, `keepalive_requests` unlimited, `location = /plaintext {{ return 200 \"Hello, \
         World!\"; }}`). Clients: `wrk -t1 -c{c} -d{s}s --latency` (depth > 1: a generated Lua script sends that \
         many `GET /plaintext` per write) and `h2load --h1 -t1 -c{c} -D {s}` (`-m D`: D requests pipelined). Each \
         client run gets a fresh server, checked to answer `GET /plaintext` first. Requests/s are the client's \
         own. Server CPU: user + system time of the server's processes (nginx: master and worker) from just \
         before the client starts to its exit, over the requests; CPU shares are of one CPU over the client's \
         measured seconds. A side at {:.0}% or more of its CPU sets the pace: when the client is, the requests/s \
         measure the client. Syscalls/request (iomux only): the server's own counters over its life over its \
         responses. Server-bound (\"in a 50% CPU quota\"): every server in a cgroup CPU quota of {:.0}% of one CPU, \
         by wrk alone, so the client has headroom and the requests/s measure the server. {} rounds first, each in \
         another order of the cells, then more for undecided claims; cells: median ± half its 95% interval.",
        p.saturated_at * 100.0,
        BOUND_SHARE * 100.0,
        p.rounds.first_rounds,
        c = p.conns,
        s = p.seconds,
    )
}

pub(super) fn svg(env: &Envelope<Params, Arm, Run>) -> CliResult<String> {
    let p = &env.params;
    let mut groups = Vec::new();
    for &scenario in &p.scenarios {
        for client in CLIENTS.into_iter().filter(|&c| scenario == Scenario::Open || c == Client::Wrk) {
            for &depth in &p.depths {
                let bound = if scenario == Scenario::Bound { " bound" } else { "" };
                groups.push((format!("{} depth {depth}{bound}", client.name()), (client, depth, scenario)));
            }
        }
    }
    let arm = |server, (client, depth, scenario)| Arm { server, client, depth, scenario };
    let what = "E6: HTTP GET /plaintext requests/s, 100 connections";
    serving::requests_bars((env, &p.servers), groups, arm, (what, "client and pipelining depth (requests per write)"))
}
