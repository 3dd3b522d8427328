//! E6's claims: iomux against nginx by wrk, open and in the quota; the C
//! floor's, which show what this machine allows; HTTPS's.

use super::*;

/// The claims: plaintext by wrk, open and in the quota, against nginx and,
/// where it runs, the C floor; then HTTPS's.
pub(super) fn all(p: &Params) -> Vec<Spec<Arm, Run>> {
    let mut claims = Vec::new();
    let wrk_at = |depth: u32, scenario: Scenario| {
        every_cell(p, move |a| {
            a.client == Client::Wrk && a.depth == depth && a.scenario == scenario && a.workload == Workload::Plain
        })
    };
    // Open at every depth; in the quota at depth 1, where the open
    // figure measures the client.
    let plain = p.workloads.contains(&Workload::Plain);
    let rate_claims = p
        .depths
        .iter()
        .map(|&d| (d, Scenario::Open))
        .chain((p.scenarios.contains(&Scenario::Bound) && p.depths.contains(&1)).then_some((1, Scenario::Bound)));
    // The floor judges iomux where iomux-epoll runs beside it; without
    // it, depth 1 would be left with no goal of iomux's.
    let has_floor = p.servers.contains(&Server::Floor) && p.servers.contains(&Server::Iomux(Backend::Epoll));
    let not_floor = |arms: Vec<Arm>| arms.into_iter().filter(|a| a.server != Server::Floor).collect::<Vec<_>>();
    for (depth, scenario) in rate_claims.filter(|(_, s)| plain && p.scenarios.contains(s)) {
        let arms = wrk_at(depth, scenario);
        let prefix = match scenario {
            Scenario::Open => format!("E6 wrk depth {depth}"),
            Scenario::Bound => format!("E6 bound wrk depth {depth}"),
        };
        let claim = Spec::iomux(
            format!("{prefix}: iomux best req/s / nginx's"),
            Needed::AtLeast(GOAL),
            not_floor(arms.clone()),
            |r| iomux_over_nginx(r, |r| r.report.requests_per_sec, f64::max),
        );
        // Open at depth 1, wrk's one thread saturates before either
        // server: the figure measures wrk, and the bound one is the goal.
        // Where the floor runs (depth 1), it shows what this machine
        // allows against nginx, and iomux's own part is judged against it.
        let client_bound = depth == 1 && scenario == Scenario::Open;
        let floor_judges = depth == 1 && has_floor;
        claims.push(if client_bound || floor_judges { claim.machine() } else { claim });
        if !(floor_judges && scenario == Scenario::Bound) {
            continue;
        }
        let floor = Arm { server: Server::Floor, client: Client::Wrk, depth, scenario, workload: Workload::Plain };
        let nginx = Arm { server: Server::Nginx, ..floor };
        claims.push(
            Spec::iomux(
                format!("{prefix}: a server of recv and send alone (the C floor), req/s / nginx's"),
                Needed::AtLeast(GOAL),
                vec![floor, nginx],
                move |r| Some(rate(r, &floor)? / rate(r, &nginx)?),
            )
            .machine(),
        );
        let epoll = Arm { server: Server::Iomux(Backend::Epoll), ..floor };
        if p.servers.contains(&epoll.server) {
            claims.push(Spec::iomux(
                format!("{prefix}: iomux-epoll req/s / the C floor's"),
                Needed::AtLeast(GOAL_OF_FLOOR),
                vec![epoll, floor],
                move |r| Some(rate(r, &epoll)? / rate(r, &floor)?),
            ));
        }
    }
    // h2load beside wrk is shown in the table, not judged: two clients,
    // each saturated in some cells, measure themselves as much as the
    // servers. Errors are judged in the cells the claims measure; every
    // cell's count is in the table. Resumed handshakes are a figure, so
    // their cells run in the first rounds alone.
    let judged = every_cell(p, |a| {
        a.client == Client::Wrk
            && a.server != Server::Floor
            && !matches!(a.workload, Workload::HttpsIdle | Workload::HttpsResumed)
    });
    claims.extend((!judged.is_empty()).then(|| {
        Spec::iomux("E6 errors reported by wrk", Needed::AtMost(0.0), judged, move |r| {
            Some(runs(r)?.iter().map(|(_, r)| r.report.errors as f64).sum())
        })
        .counted()
    }));
    if plain && p.depths.contains(&1) && p.scenarios.contains(&Scenario::Open) {
        let arms = wrk_at(1, Scenario::Open);
        let cpu = |r: &Run| r.server_cpu_us_per_request;
        let claim = Spec::iomux(
            "E6 wrk depth 1: nginx CPU/request / iomux best's",
            Needed::AtLeast(GOAL),
            not_floor(arms.clone()),
            move |r| iomux_over_nginx(r, cpu, f64::min).map(|x| 1.0 / x),
        );
        // The floor's CPU per request shows how far below nginx's
        // this machine's kernel lets any server go.
        if !has_floor {
            claims.push(claim);
        } else {
            claims.push(claim.machine());
            let floor_arms: Vec<Arm> = arms.into_iter().filter(|a| !a.server.is_iomux()).collect();
            claims.push(
                Spec::iomux(
                    "E6 wrk depth 1: nginx CPU/request / the C floor's",
                    Needed::AtLeast(GOAL),
                    floor_arms,
                    move |r| {
                        let of = |who: Server| best_of(r, move |s| *s == who, cpu, f64::min);
                        Some(of(Server::Nginx)? / of(Server::Floor)?)
                    },
                )
                .machine(),
            );
        }
    }
    claims.extend(https_claims(p));
    claims
}

/// The best iomux's figure over nginx's, `best` choosing among iomux's.
fn iomux_over_nginx(r: &RoundView<'_, Arm, Run>, figure: fn(&Run) -> f64, best: fn(f64, f64) -> f64) -> Option<f64> {
    Some(best_of(r, Server::is_iomux, figure, best)? / best_of(r, |s| *s == Server::Nginx, figure, best)?)
}

/// The requests/s of `arm`'s run in the round.
fn rate(r: &RoundView<'_, Arm, Run>, arm: &Arm) -> Option<f64> {
    r.get(arm).map(|run| run.report.requests_per_sec)
}

/// `figure` of the round's runs of the servers `pick` keeps, the best by `best`.
fn best_of(
    r: &RoundView<'_, Arm, Run>,
    pick: impl Fn(&Server) -> bool,
    figure: fn(&Run) -> f64,
    best: fn(f64, f64) -> f64,
) -> Option<f64> {
    runs(r)?.iter().filter(|(a, _)| pick(&a.server)).map(|(_, r)| figure(r)).reduce(best)
}

/// The claim's runs in a round, each with its arm.
fn runs<'a>(r: &RoundView<'a, Arm, Run>) -> Option<Vec<(&'a Arm, &'a Run)>> {
    Some(r.samples().to_vec())
}

/// HTTPS's goals, each judged in the cells of its workload: keep-alive
/// and full handshakes in the quota (requests/s, each request its own
/// handshake in the second), and the memory of idle connections.
fn https_claims(p: &Params) -> Vec<Spec<Arm, Run>> {
    let mut claims = Vec::new();
    let of = |workload: Workload| every_cell(p, move |a| a.workload == workload);
    let rates = [
        (Workload::Https, "E6 https bound wrk: iomux best req/s / nginx's"),
        (Workload::HttpsFull, "E6 https bound full handshakes/s: iomux best / nginx's"),
    ];
    for (workload, name) in rates {
        let arms = of(workload);
        if !arms.is_empty() {
            claims.push(Spec::iomux(name, Needed::AtLeast(GOAL), arms, |r| {
                iomux_over_nginx(r, |r| r.report.requests_per_sec, f64::max)
            }));
        }
    }
    let arms = of(Workload::HttpsIdle);
    // select alone past FD_SETSIZE leaves no iomux server to judge.
    if arms.iter().any(|a| a.server.is_iomux()) {
        let name = "E6 https idle: iomux RSS per TLS connection / nginx's";
        claims.push(Spec::iomux(name, Needed::AtMost(IDLE_MEMORY_GOAL), arms, |r| {
            iomux_over_nginx(r, |r| r.idle_rss_bytes_per_conn.unwrap_or(f64::NAN), f64::min)
        }));
    }
    claims
}
