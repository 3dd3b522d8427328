//! E6's page: its tables, intro and plot.

use super::*;
use crate::lab::experiments::serving::fixed;

impl Shown for Http {
    fn view(env: &Envelope<Params, Arm, Run>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View { intro: vec![intro(p)], ..View::default() };
        if !every_cell(p, |a| a.workload.is_tls()).is_empty() {
            view.intro.push(https_intro(p));
        }
        view.intro.extend(missing_line(&p.missing));
        let plain = p.workloads.contains(&Workload::Plain);
        let tables = p.scenarios.iter().filter(|_| plain).flat_map(|&scenario| {
            CLIENTS
                .into_iter()
                .filter(move |&c| scenario == Scenario::Open || c == Client::Wrk)
                .map(move |c| (scenario, c))
        });
        for (scenario, client) in tables {
            for &depth in &p.depths {
                let nginx = env.estimate(
                    &Arm { server: Server::Nginx, client, depth, scenario, workload: Workload::Plain },
                    |r| r.report.requests_per_sec,
                );
                let wrk = client == Client::Wrk;
                let mut t = TableView {
                    caption: match scenario {
                        Scenario::Open => format!("{} depth {depth}", client.name()),
                        Scenario::Bound => format!("{} depth {depth}, every server in a 50% CPU quota", client.name()),
                    },
                    header: serving::REQUEST_COLUMNS
                        .into_iter()
                        .chain([
                            if wrk { "p50 us" } else { "mean us" },
                            if wrk { "p99 us" } else { "-" },
                            "errors",
                            "syscalls/req",
                        ])
                        .map(String::from)
                        .collect(),
                    rows: Vec::new(),
                };
                for &server in &p.servers {
                    let arm = Arm { server, client, depth, scenario, workload: Workload::Plain };
                    if !is_cell(p, &arm) {
                        continue;
                    }
                    let quota = (scenario == Scenario::Bound).then(|| Workload::Plain.quota_share());
                    let footnote = &mut |why: &str| view.footnote(why);
                    let mut row =
                        serving::request_row(env, (&arm, server.to_string(), quota), nginx, SATURATED, footnote);
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
        https_tables(env, &mut view);
        if plain && !env.takes.is_empty() {
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
         World!\"; }}`), and by wrk at depth 1 the floor: a C server (`iomux peer --server c-http-floor`) that \
         answers each request's end of head with iomux's response, canned, and does nothing else, so it spends \
         only what the kernel does. Clients: `wrk -t1 -c{c} -d{s}s --latency` (depth > 1: a generated Lua script sends that \
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

pub(super) fn https_intro(p: &Params) -> String {
    format!(
        "HTTPS: one ECDSA P-256 certificate, made by the lab, for every server; TLS 1.3 with {suite} and {group} \
         only (iomux: `--tls-suites`, `--tls-groups`; nginx: `ssl_protocols TLSv1.3`, `ssl_ecdh_curve`, \
         `ssl_conf_command Ciphersuites`), checked by a probe before each run. Keep-alive: wrk over https, every \
         server in a {ka:.0}% quota. Handshakes: wrk with `Connection: close`, a connection per request, every server \
         in a {hs:.0}% quota so that wrk's one thread keeps ahead of the server (at 50%, iomux's full handshakes \
         outpaced it). Full: resumption off on every server (`--tls-no-resumption`; nginx `ssl_session_tickets off`, \
         `ssl_session_cache off`); resumed: tickets on, and wrk resumes the session it keeps. Handshakes are \
         counted by the server over its life: iomux's stats, and nginx's log of `$ssl_session_reused` (in these \
         cells only). Idle: `iomux load --conns 0 --idle {idle} --tls-ca` on the client's CPU opens and holds {idle} \
         TLS connections; each server's resident memory (all its processes) is read every 10 ms, and the most it \
         held less its first reading, over {idle}, is its memory per connection (iomux with `--http-header-timeout \
         60`, as nginx's `client_header_timeout`){select}.",
        suite = tls::SUITE,
        group = tls::GROUP,
        ka = Workload::Https.quota_share() * 100.0,
        hs = Workload::HttpsFull.quota_share() * 100.0,
        idle = p.tls_idle,
        select = match select_left_out(p) {
            true => "; iomux-select has no idle cell: it watches only fd numbers below FD_SETSIZE (1,024)",
            false => "",
        },
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
    let arm = |server, (client, depth, scenario)| Arm { server, client, depth, scenario, workload: Workload::Plain };
    let what = "E6: HTTP GET /plaintext requests/s, 100 connections";
    serving::requests_bars((env, &p.servers), groups, arm, (what, "client and pipelining depth (requests per write)"))
}

/// HTTPS in the quota (a row per workload and server), then the memory of
/// idle TLS connections.
fn https_tables(env: &Envelope<Params, Arm, Run>, view: &mut View) {
    let p = &env.params;
    let bound = [Workload::Https, Workload::HttpsFull, Workload::HttpsResumed];
    let measured: Vec<Workload> = bound.into_iter().filter(|w| p.workloads.contains(w)).collect();
    let cell = |server, workload| Arm { server, client: Client::Wrk, depth: 1, scenario: Scenario::Bound, workload };
    if !measured.is_empty() && p.scenarios.contains(&Scenario::Bound) {
        let header: Vec<&str> = std::iter::once("workload")
            .chain(serving::REQUEST_COLUMNS)
            .chain(["handshakes full", "resumed", "errors"])
            .collect();
        let caption = format!(
            "HTTPS (TLS 1.3, {}, {}) by wrk, every server in the same CPU quota: {:.0}% of a CPU for keep-alive, \
             {:.0}% for a handshake per request",
            tls::SUITE,
            tls::GROUP,
            Workload::Https.quota_share() * 100.0,
            Workload::HttpsFull.quota_share() * 100.0
        );
        let mut t = TableView::new(caption, &header, Vec::new());
        for workload in measured {
            let nginx = env.estimate(&cell(Server::Nginx, workload), |r| r.report.requests_per_sec);
            for &server in &p.servers {
                let arm = cell(server, workload);
                if !is_cell(p, &arm) {
                    continue;
                }
                let footnote = &mut |why: &str| view.footnote(why);
                let mut row = vec![workload.to_string()];
                let quota = Some(workload.quota_share());
                row.extend(serving::request_row(env, (&arm, server.to_string(), quota), nginx, SATURATED, footnote));
                let handshakes = |f: fn(&Handshakes) -> u64| {
                    let counted = env.estimate(&arm, |r| r.handshakes.as_ref().map_or(f64::NAN, |h| f(h) as f64));
                    fixed(counted.map(|e| e.median), 0)
                };
                row.extend([
                    handshakes(|h| h.full),
                    handshakes(|h| h.resumed),
                    env.kept(&arm).map(|r| r.report.errors).sum::<u64>().to_string(),
                ]);
                t.rows.push(row);
            }
        }
        view.tables.push(t);
    }
    if p.workloads.contains(&Workload::HttpsIdle) {
        let cell = |server| Arm {
            server,
            client: Client::Wrk,
            depth: 1,
            scenario: Scenario::Open,
            workload: Workload::HttpsIdle,
        };
        let rss = |r: &Run| r.idle_rss_bytes_per_conn.unwrap_or(f64::NAN);
        let nginx = env.estimate(&cell(Server::Nginx), rss).map(|e| e.median);
        let mut t = TableView::new(
            format!(
                "{} idle TLS connections held by iomux load: the server's resident memory per connection",
                p.tls_idle
            ),
            &["server", "runs", "RSS per connection (B)", "/ nginx"],
            Vec::new(),
        );
        for &server in &p.servers {
            let arm = cell(server);
            if !is_cell(p, &arm) {
                continue;
            }
            let estimate = env.estimate(&arm, rss);
            let median = estimate.as_ref().map(|e| e.median);
            t.rows.push(vec![
                server.to_string(),
                env.kept(&arm).count().to_string(),
                crate::lab::render::markdown::cell(estimate),
                fixed(median.zip(nginx).map(|(m, n)| m / n), 2),
            ]);
        }
        view.tables.push(t);
    }
}
