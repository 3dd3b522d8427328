//! E6's plan, claims and cells, on made-up runs.

use super::*;
use crate::lab::harness::claim::{Claim, Source};
use crate::lab::harness::trial::judged_quiet;
use iomux::Backend;

fn run(rate: f64, client_util: f64, errors: u64) -> Run {
    let report = Report { requests: rate as u64, seconds: 1.0, requests_per_sec: rate, errors, ..Report::default() };
    Run {
        report,
        server_cpu_us_per_request: 1e6 / rate,
        server_util: 1.0,
        client_util,
        syscalls_per_request: None,
        throttled_periods: None,
        handshakes: None,
        idle_rss_bytes_per_conn: None,
    }
}

/// E6's plaintext claims over six quiet rounds of what `value` gives each cell.
fn judged(servers: Vec<Server>, value: impl Fn(&Arm) -> Measured<Run>) -> Vec<Claim> {
    judged_with(servers, vec![Workload::Plain], value)
}

fn judged_with(servers: Vec<Server>, workloads: Vec<Workload>, value: impl Fn(&Arm) -> Measured<Run>) -> Vec<Claim> {
    let p = plan(servers, workloads, 100);
    judged_quiet(&Http::claims(&p), &every_cell(&p, |_| true), value)
}

/// Both clients, depths 1 and 16, both scenarios, six rounds.
fn plan(servers: Vec<Server>, workloads: Vec<Workload>, tls_idle: u32) -> Params {
    Params {
        servers,
        depths: vec![1, 16],
        scenarios: vec![Scenario::Open, Scenario::Bound],
        workloads,
        tls_idle,
        clients: vec![(Client::Wrk, "wrk".into()), (Client::H2load, "h2load".into())],
        missing: vec![],
        conns: CONNS,
        rounds: Rounds::fixed(6, 0.0),
        seconds: 1,
        pinned: None,
        saturated_at: SATURATED,
    }
}

#[test]
fn claims_take_the_best_iomux_and_the_worst_disagreement() {
    let (i, n) = (Server::Iomux(Backend::Uring), Server::Nginx);
    let claims = judged(vec![i, n], |a| {
        Ok(Ok(match (a.server, a.client, a.depth) {
            // In the quota, iomux serves 1.25 times nginx's requests/s.
            (Server::Nginx, _, _) if a.scenario == Scenario::Bound => run(80_000.0, 0.4, 0),
            (_, _, _) if a.scenario == Scenario::Bound => run(100_000.0, 0.5, 0),
            (Server::Nginx, Client::Wrk, 1) => run(212_000.0, 0.97, 0),
            (Server::Nginx, Client::Wrk, _) => run(320_000.0, 0.75, 0),
            (Server::Nginx, Client::H2load, 1) => run(212_000.0, 0.9, 0),
            (Server::Nginx, Client::H2load, _) => run(321_000.0, 0.7, 0),
            (_, Client::Wrk, 1) => run(220_000.0, 0.99, 0),
            (_, Client::Wrk, _) => run(2_000_000.0, 0.99, 0),
            (_, Client::H2load, 1) => run(210_000.0, 0.99, 0),
            _ => run(1_400_000.0, 0.99, 0),
        }))
    });
    let median = |q: &str| claims.iter().find(|c| c.quantity == q).and_then(|c| c.estimate).map(|e| e.median);
    assert_eq!(median("E6 wrk depth 1: iomux best req/s / nginx's"), Some(220_000.0 / 212_000.0));
    assert_eq!(median("E6 wrk depth 16: iomux best req/s / nginx's"), Some(6.25));
    assert_eq!(median("E6 errors reported by wrk"), Some(0.0));
    assert_eq!(median("E6 wrk depth 1: nginx CPU/request / iomux best's"), Some(220_000.0 / 212_000.0));
    assert_eq!(median("E6 bound wrk depth 1: iomux best req/s / nginx's"), Some(1.25));
    assert_eq!(claims.len(), 5, "{claims:?}");
}

/// The floor runs by wrk at depth 1 alone; there it shows what the
/// machine allows against nginx, and iomux-epoll is judged against it.
#[test]
fn the_floor_judges_iomux_where_it_runs() {
    let (e, u, n, f) = (Server::Iomux(Backend::Epoll), Server::Iomux(Backend::Uring), Server::Nginx, Server::Floor);
    let claims = judged(vec![e, u, n, f], |a| {
        assert!(a.server != f || (a.client == Client::Wrk && a.depth == 1), "the floor in {a}");
        let bound = a.scenario == Scenario::Bound;
        Ok(Ok(match a.server {
            // Errors from the floor are not iomux's.
            Server::Floor => run(if bound { 110_000.0 } else { 250_000.0 }, 0.9, 5),
            Server::Nginx => run(if bound { 100_000.0 } else { 200_000.0 }, 0.9, 0),
            _ if a.server == e => run(if bound { 108_000.0 } else { 220_000.0 }, 0.9, 0),
            _ => run(if bound { 104_000.0 } else { 230_000.0 }, 0.9, 0),
        }))
    });
    let get = |q: &str| claims.iter().find(|c| c.quantity == q).unwrap_or_else(|| panic!("no claim {q}: {claims:?}"));
    let median = |q: &str| get(q).estimate.map(|e| (e.median * 1e6).round() / 1e6);
    let near = |v: f64| Some((v * 1e6).round() / 1e6);
    for (q, m, source) in [
        ("E6 bound wrk depth 1: iomux best req/s / nginx's", 1.08, Source::Machine),
        ("E6 bound wrk depth 1: a server of recv and send alone (the C floor), req/s / nginx's", 1.1, Source::Machine),
        ("E6 bound wrk depth 1: iomux-epoll req/s / the C floor's", 108.0 / 110.0, Source::Iomux),
        ("E6 wrk depth 1: nginx CPU/request / iomux best's", 230.0 / 200.0, Source::Machine),
        ("E6 wrk depth 1: nginx CPU/request / the C floor's", 250.0 / 200.0, Source::Machine),
        ("E6 wrk depth 16: iomux best req/s / nginx's", 230.0 / 200.0, Source::Iomux),
        ("E6 errors reported by wrk", 0.0, Source::Iomux),
    ] {
        assert_eq!(median(q), near(m), "{q}");
        assert_eq!(get(q).source, source, "{q}");
    }
    assert_eq!(claims.len(), 8, "{claims:?}");
}

#[test]
fn errors_count_and_a_failed_cell_is_named() {
    let i = Server::Iomux(Backend::Epoll);
    let claims = judged(vec![i], |a| match (a.client, a.depth) {
        (Client::Wrk, 16) => Ok(Err("server died".into())),
        (Client::Wrk, 1) => Ok(Ok(run(1000.0, 0.5, 3))),
        _ => Ok(Ok(run(1000.0, 0.5, 0))),
    });
    let get = |q: &str| claims.iter().find(|c| c.quantity == q).unwrap();
    let errors = get("E6 errors reported by wrk");
    assert_eq!(errors.verdict, crate::lab::harness::claim::Verdict::NotMeasurable, "{errors:?}");
    assert!(errors.why.contains("server died"), "{errors:?}");
}

#[test]
fn https_claims_judge_their_own_cells_and_leave_plaintext_alone() {
    let (i, n) = (Server::Iomux(Backend::Epoll), Server::Nginx);
    let all = vec![Workload::Plain, Workload::Https, Workload::HttpsFull, Workload::HttpsResumed, Workload::HttpsIdle];
    let claims = judged_with(vec![i, n], all, |a| {
        let nginx = a.server == Server::Nginx;
        Ok(Ok(match a.workload {
            Workload::Plain => run(if nginx { 80_000.0 } else { 100_000.0 }, 0.5, 0),
            Workload::Https => run(if nginx { 50_000.0 } else { 75_000.0 }, 0.5, 0),
            Workload::HttpsFull => run(if nginx { 1_000.0 } else { 2_000.0 }, 1.0, 0),
            // Resumed handshakes are a figure, not a goal: any rate, or
            // errors (which fail the cell when measured), changes no claim.
            Workload::HttpsResumed => run(if nginx { 9e9 } else { 1.0 }, 1.0, 7),
            Workload::HttpsIdle => {
                Run { idle_rss_bytes_per_conn: Some(if nginx { 50_000.0 } else { 5_000.0 }), ..run(1.0, 0.0, 0) }
            }
        }))
    });
    let median = |q: &str| claims.iter().find(|c| c.quantity == q).and_then(|c| c.estimate).map(|e| e.median);
    assert_eq!(median("E6 bound wrk depth 1: iomux best req/s / nginx's"), Some(1.25));
    assert_eq!(median("E6 https bound wrk: iomux best req/s / nginx's"), Some(1.5));
    assert_eq!(median("E6 https bound full handshakes/s: iomux best / nginx's"), Some(2.0));
    assert_eq!(median("E6 https idle: iomux RSS per TLS connection / nginx's"), Some(0.1));
    assert_eq!(median("E6 errors reported by wrk"), Some(0.0));
    assert_eq!(claims.len(), 8, "{claims:?}");
    // Without plaintext, no plaintext claim is made (none "not measured").
    let https_only = judged_with(vec![i, n], vec![Workload::Https], |_| Ok(Ok(run(1.0, 0.5, 0))));
    let names: Vec<&str> = https_only.iter().map(|c| c.quantity.as_str()).collect();
    assert_eq!(names, ["E6 errors reported by wrk", "E6 https bound wrk: iomux best req/s / nginx's"]);
}

#[test]
fn a_memory_cell_gives_no_request_figures() {
    let idle = Run { idle_rss_bytes_per_conn: Some(5_000.0), ..run(1.0, 0.0, 0) };
    let values: Vec<f64> = Http::metrics().iter().map(|m| (m.get)(&idle)).collect();
    assert!(values[0].is_nan() && values[1].is_nan() && values[2] == 5_000.0, "{values:?}");
    let served = run(1_000.0, 0.5, 0);
    let values: Vec<f64> = Http::metrics().iter().map(|m| (m.get)(&served)).collect();
    assert!(values[0] == 1_000.0 && values[2].is_nan(), "{values:?}");
    let arm = Arm {
        server: Server::Nginx,
        client: Client::Wrk,
        depth: 1,
        scenario: Scenario::Bound,
        workload: Workload::HttpsFull,
    };
    assert_eq!(arm.to_string(), "nginx wrk depth 1 https full handshakes bound");
}

#[test]
fn select_has_no_idle_cell_past_fd_setsize() {
    let (select, epoll) = (Server::Iomux(Backend::Select), Server::Iomux(Backend::Epoll));
    let plan = |servers: Vec<Server>, tls_idle: u32| plan(servers, vec![Workload::HttpsIdle], tls_idle);
    let servers = |p: &Params| every_cell(p, |_| true).iter().map(|a| a.server).collect::<Vec<_>>();
    let small = plan(vec![select, epoll, Server::Nginx], 1000);
    assert_eq!(servers(&small), vec![select, epoll, Server::Nginx], "1,000 fit below FD_SETSIZE");
    assert!(!select_left_out(&small));
    let full = plan(vec![select, epoll, Server::Nginx], 10_000);
    assert_eq!(servers(&full), vec![epoll, Server::Nginx]);
    assert!(select_left_out(&full) && view::https_intro(&full).contains("iomux-select has no idle cell"));
    let idle_claim = |p: &Params| Http::claims(p).iter().any(|c| c.quantity.contains("https idle"));
    assert!(idle_claim(&full), "judged over epoll");
    assert!(!idle_claim(&plan(vec![select, Server::Nginx], 10_000)), "no iomux server left to judge");
}
