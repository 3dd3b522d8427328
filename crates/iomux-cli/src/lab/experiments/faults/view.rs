//! E8's page: its tables (the mechanisms, a row per profile and backend) and its plot.

use super::*;

impl Shown for Faults {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View {
            intro: vec![format!(
                "Server (iomux serve, echo) and load (iomux load, {} client) in two network namespaces joined by \
                 a veth pair; each profile's faults set inside them. Echo profiles: {} connections x {} messages \
                 of {} B ({REORDER_MSG_SIZE} B under reorder, so that a flow has segments to reorder), every byte \
                 checked by the load; an echo stalled when it took longer than the profile's round trip and the \
                 retransmission timeouts of the longest run of losses the cell may meet explain (the bound). \
                 Vanished profiles: {} idle connections, then every TCP \
                 packet of one side dropped and that side gone; --keepalive {} s on the side that must let go \
                 (reclaimed within {:.1} s by design): the server, on the row's backend, under vanished; the \
                 load, on the row's backend, under server-vanished (the killed server runs epoll). select holds \
                 more than FD_SETSIZE of them as several processes (--procs, about 800 connections each). Medians of the runs; counts are totals over all runs.",
                p.load_backend, p.conns, p.per_conn, p.msg_size, p.vanishing, p.keepalive_s, p.reclaim_bound_s
            )],
            ..View::default()
        };
        if let Some(why) = &p.unavailable {
            view.intro.push(format!("Not run here: {why}."));
        }
        let dropped: u64 = env.takes.iter().map(|t| t.value.delay_line_drops).sum();
        if dropped > 0 {
            view.intro.push(format!(
                "The delay line dropped {dropped} packets in all (its queue full): loss no profile asked for."
            ));
        }
        let mut mechanisms = TableView {
            caption: "How each profile was emulated on this machine:".into(),
            header: ["profile", "mechanism", "left out"].map(String::from).to_vec(),
            rows: Vec::new(),
        };
        for e in &p.emulations {
            mechanisms.rows.push(vec![
                e.profile.to_string(),
                e.mechanism.clone().unwrap_or_else(|| "not emulated".into()),
                e.caveat.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        let mut results = TableView {
            caption: "Per profile and backend:".into(),
            header: [
                "profile",
                "backend",
                "runs",
                "echoes",
                "bytes checked",
                "mismatched",
                "closed early (reset; reconnected)",
                "unanswered",
                "retransmits",
                "p50 us",
                "p99 us",
                "p99.9 us",
                "max us",
                "stalls (bound s)",
                "server CPU s",
                "vanished",
                "reclaim s",
                "left open",
            ]
            .map(String::from)
            .to_vec(),
            rows: Vec::new(),
        };
        for &profile in p.profiles.iter() {
            for &backend in &p.backends {
                let arm = Arm { profile, backend };
                if let Some(n) = env.note(&arm) {
                    let mark = view.footnote(n);
                    results.rows.push(vec![profile.to_string(), backend.to_string(), format!("n/a {mark}")]);
                    continue;
                }
                let runs: Vec<&Sample> = env.kept(&arm).collect();
                let total = |f: fn(&Sample) -> u64| runs.iter().map(|s| f(s)).sum::<u64>().to_string();
                let med = |f: fn(&Sample) -> f64| shown(env.estimate(&arm, f));
                results.rows.push(vec![
                    profile.to_string(),
                    backend.to_string(),
                    runs.len().to_string(),
                    total(|s| s.echoes),
                    total(|s| s.bytes_checked),
                    total(|s| s.mismatches),
                    format!("{} ({}; {})", total(|s| s.closed_early), total(|s| s.resets), total(|s| s.reconnects)),
                    total(|s| s.unanswered),
                    total(|s| s.retransmits),
                    med(|s| s.p50_us.unwrap_or(f64::NAN)),
                    med(|s| s.p99_us.unwrap_or(f64::NAN)),
                    med(|s| s.p999_us.unwrap_or(f64::NAN)),
                    med(|s| s.max_us.unwrap_or(f64::NAN)),
                    match vanishing(profile) {
                        true => "-".into(),
                        false => format!("{} ({})", total(|s| s.stalled), med(|s| s.stall_bound_s.unwrap_or(f64::NAN))),
                    },
                    med(|s| s.server_cpu_s.unwrap_or(f64::NAN)),
                    total(|s| s.vanished),
                    med(|s| s.reclaim_s),
                    total(|s| s.left_open),
                ]);
            }
        }
        view.tables = vec![mechanisms, results];
        view.svg = plot(env)?;
        Ok(view)
    }
}

/// p99 echo latency per profile (or, with vanished profiles alone, the
/// seconds to reclaim), a bar per backend.
pub(super) fn plot(env: &Envelope<Params, Arm, Sample>) -> CliResult<Option<String>> {
    let p = &env.params;
    let echo: Vec<Profile> = p.profiles.iter().copied().filter(|&pr| !vanishing(pr)).collect();
    type Get = fn(&Sample) -> f64;
    let (profiles, get, title, y): (Vec<Profile>, Get, &str, &str) = match echo.is_empty() {
        false => (
            echo,
            |s| s.p99_us.map_or(f64::NAN, |us| us / 1000.0),
            "E8: p99 echo latency under each profile",
            "p99 latency (ms)",
        ),
        true => (
            p.profiles.iter().copied().filter(|&pr| vanishing(pr)).collect(),
            |s| s.reclaim_s,
            "E8: seconds to reclaim vanished peers' connections",
            "seconds",
        ),
    };
    if profiles.is_empty() || p.unavailable.is_some() {
        return Ok(None);
    }
    let groups: Vec<String> = profiles.iter().map(Profile::to_string).collect();
    let series: Vec<BarSeries> = p
        .backends
        .iter()
        .map(|&backend| BarSeries::of(backend, env, profiles.iter().map(|&profile| Arm { profile, backend }), get))
        .collect();
    grouped_bars(title, "profile", y, &groups, &series).map(Some)
}
