//! E9's page: its tables, intro and plot.

use super::*;

impl Shown for ProxyBench {
    fn view(env: &Envelope<Params, Arm, Run>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View { intro: vec![intro(p)], ..View::default() };
        view.intro.extend(missing_line(&p.missing));
        if let Some(why) = &p.many_limited {
            view.intro.push(format!("many: {why}."));
        }
        for &load in &p.loads {
            let haproxy = env.estimate(&Arm { server: Proxy::Haproxy, load }, |r| r.rate.unwrap_or(f64::NAN));
            let haproxy_cost = env.estimate(&Arm { server: Proxy::Haproxy, load }, |r| r.cost);
            let (caption, rate, cost) = match load {
                Load::Requests => (
                    "requests: wrk -t1 -c100 GET /plaintext through each proxy to nginx",
                    "requests/s",
                    "proxy CPU us/req",
                ),
                Load::Bulk => ("bulk: one connection's bytes through each proxy to a sink", "MB/s", "proxy CPU s/GB"),
                Load::Many => ("many: idle proxied connections", "-", "proxy RSS bytes/conn"),
            };
            let mut t = TableView::new(
                format!("{caption}, every proxy in a {:.0}% CPU quota", p.bound_share * 100.0),
                &[
                    "proxy",
                    "runs",
                    rate,
                    "/ haproxy",
                    cost,
                    "/ haproxy",
                    "proxy CPU",
                    "client CPU",
                    "p50 us",
                    "p99 us",
                    "errors",
                ],
                Vec::new(),
            );
            for &proxy in &p.proxies {
                let arm = Arm { server: proxy, load };
                if !runs_under(proxy, load) {
                    continue;
                }
                let mut name = proxy.to_string();
                if let Some(why) = env.note(&arm) {
                    name = format!("{name} {}", view.footnote(why));
                }
                let med = |f: &dyn Fn(&Run) -> f64| env.estimate(&arm, f).map(|e| e.median);
                let fixed = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
                let pct =
                    |v: Option<f64>| v.filter(|v| v.is_finite()).map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
                let client_util = med(&|r| r.client_util.unwrap_or(f64::NAN));
                if client_util.is_some_and(|u| u.is_finite() && u >= p.saturated_at) {
                    let why = format!(
                        "{arm}: the client used {:.0}% of its CPU: it set the pace",
                        client_util.unwrap_or(0.0) * 100.0
                    );
                    name = format!("{name} {}", view.footnote(&why));
                }
                if env.kept(&arm).any(|r| r.throttled_periods == Some(0)) && load != Load::Many {
                    let why = format!("{arm}: the quota never held the proxy back in some runs");
                    name = format!("{name} {}", view.footnote(&why));
                }
                let r = env.estimate(&arm, |r| r.rate.unwrap_or(f64::NAN));
                let c = env.estimate(&arm, |r| r.cost);
                let wrk =
                    |f: fn(&Report) -> Option<f64>| med(&move |r| r.report.as_ref().and_then(f).unwrap_or(f64::NAN));
                t.rows.push(vec![
                    name,
                    env.kept(&arm).count().to_string(),
                    shown(r),
                    fixed(r.zip(haproxy).map(|(r, h)| r.median / h.median), 2),
                    shown(c),
                    fixed(c.zip(haproxy_cost).map(|(c, h)| c.median / h.median), 2),
                    pct(med(&|r| r.proxy_util.unwrap_or(f64::NAN))),
                    pct(client_util),
                    fixed(wrk(|w| w.p50_us), 0),
                    fixed(wrk(|w| w.p99_us), 0),
                    env.kept(&arm).filter_map(|r| r.report.as_ref()).map(|w| w.errors).sum::<u64>().to_string(),
                ]);
            }
            view.tables.push(t);
        }
        if env.takes.iter().any(|t| t.arm.load == Load::Requests) {
            view.svg = Some(svg(env)?);
        }
        Ok(view)
    }
}

pub(super) fn intro(p: &Params) -> String {
    let placement = match p.pinned {
        Some((s, c)) => format!(
            "Every proxy runs pinned to CPU {s} in a cgroup CPU quota of {:.0}% of one CPU; its upstream (nginx for \
             requests) on CPU {s} outside the quota; the client (wrk, the bulk sender) on CPU {c}.",
            p.bound_share * 100.0
        ),
        None => "This machine has one CPU, so nothing is pinned.".to_string(),
    };
    format!(
        "{placement} Proxies: `iomux serve --proto proxy --upstream ADDR --backend B` (one loop; `--splice auto`, and for bulk \
         also `--splice off`: copying), haproxy (tcp mode, \
         `nbthread 1`, `option splice-auto`) and the floor (`iomux peer --server c-relay-floor`: one recv and one \
         send per message, nothing else; requests only) and its io_uring twin (`uring-relay-floor`: one receive \
         and one send per message, SINGLE_ISSUER | DEFER_TASKRUN, one io_uring_enter per turn). requests: `wrk -t1 -c{c} -d{s}s --latency` through each \
         proxy to nginx (`return 200`): requests/s are wrk's; proxy CPU: user + system time of the proxy's process \
         over wrk's run, over its requests. bulk: one connection sends {b} MiB through the proxy to `iomux serve \
         --proto sink`, then waits for the proxy's end: proxy CPU per GB and MB/s. many: {m} connections through \
         the proxy to an echo server, each echoes one byte and is then held: the proxy's RSS growth over them. A \
         fresh proxy (and upstream) per cell. {r} rounds first, each in another order, then more for undecided \
         claims; cells: median ± half its 95% interval. The floor's claim is what this machine allows: on this \
         kernel almost all of a proxy's time is TCP over loopback, the same for every proxy.",
        c = p.conns,
        s = p.seconds,
        b = p.bulk_mib,
        m = p.many,
        r = p.rounds.first_rounds,
    )
}

pub(super) fn svg(env: &Envelope<Params, Arm, Run>) -> CliResult<String> {
    let p = &env.params;
    let series: Vec<plot::BarSeries> = p
        .proxies
        .iter()
        .filter(|&&proxy| runs_under(proxy, Load::Requests))
        .map(|&proxy| {
            plot::BarSeries::of(proxy, env, [Arm { server: proxy, load: Load::Requests }], |r| {
                r.rate.unwrap_or(f64::NAN)
            })
        })
        .collect();
    plot::grouped_bars(
        "E9: requests/s through each proxy to nginx, wrk -c100, every proxy in one CPU quota (median, 95% interval)",
        "load",
        "requests/s",
        &["requests".to_string()],
        &series,
    )
}
