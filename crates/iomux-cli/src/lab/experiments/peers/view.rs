//! E5's page: its tables, intro and plot.

use super::*;

impl Shown for Peers {
    fn view(env: &Envelope<Params, Arm, Run>) -> CliResult<View> {
        let p = &env.params;
        let mut view = View { intro: vec![intro(p)], ..View::default() };
        for &s in &p.scenarios {
            let best = best_cpu(env, p, s);
            let mut t = TableView::new(
                format!("{}: {}", s.name(), s.describe()),
                &[
                    "server",
                    "runs",
                    "echoes/s",
                    "server CPU us/echo",
                    "load CPU us/echo",
                    "p50 us",
                    "p99 us",
                    "p99.9 us",
                    "syscalls/echo",
                    "RSS KiB",
                    "bottleneck",
                    "iomux best / this, CPU",
                ],
                Vec::new(),
            );
            for &server in &p.servers {
                let arm = Arm { server, scenario: s, perf: false };
                let mut name = server.name();
                if let Some(why) = env.note(&arm) {
                    name = format!("{name} {}", view.footnote(&format!("{arm}: {why}")));
                }
                let short = env.kept(&arm).filter(|r| !sustained(&s, r)).count();
                if short > 0 {
                    let why = format!(
                        "{arm}: rate not sustained in {short} run(s) (echoes/s under {:.0}% of {} or the load \
                         saturated); the claims leave those rounds out",
                        SUSTAINED * 100.0,
                        thousands(OPEN_RATE)
                    );
                    name = format!("{name} {}", view.footnote(&why));
                }
                let med = |f: fn(&Run) -> f64| env.estimate(&arm, f).map(|e| e.median);
                let fixed = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
                let cpu = med(|r| r.cpu_us_per_echo);
                let perf = Arm { perf: true, ..arm };
                let syscalls = env.takes.iter().find(|t| t.arm == perf).and_then(|t| t.value.syscalls_per_echo);
                let bottleneck = med(|r| r.server_util).zip(med(|r| r.load_util)).map(|(s, l)| bottleneck(s, l));
                t.rows.push(vec![
                    name,
                    env.kept(&arm).count().to_string(),
                    shown(env.estimate(&arm, |r| r.echoes_per_sec)),
                    shown(env.estimate(&arm, |r| r.cpu_us_per_echo)),
                    fixed(med(|r| r.load_cpu_us_per_echo), 3),
                    fixed(med(|r| r.p50_us), 0),
                    fixed(med(|r| r.p99_us), 0),
                    fixed(med(|r| r.p999_us), 0),
                    fixed(syscalls, 3),
                    med(|r| r.rss_bytes.unwrap_or(f64::NAN)).map_or("-".into(), |v| thousands(v / 1024.0)),
                    bottleneck.unwrap_or("-").into(),
                    fixed(best.zip(cpu).map(|(b, c)| b / c), 3),
                ]);
            }
            view.tables.push(t);
        }
        view.svg = Some(svg(env)?);
        Ok(view)
    }
}

/// The best (lowest) median CPU per echo of iomux's servers in `s`.
pub(super) fn best_cpu(env: &Envelope<Params, Arm, Run>, p: &Params, s: Scenario) -> Option<f64> {
    p.servers
        .iter()
        .filter(|v| v.is_iomux())
        .filter_map(|&server| env.estimate(&Arm { server, scenario: s, perf: false }, |r| r.cpu_us_per_echo))
        .map(|e| e.median)
        .reduce(f64::min)
}

pub(super) fn intro(p: &Params) -> String {
    let placement = match p.pinned {
        Some((server, load)) => format!(
            "Every server runs on one thread pinned to CPU {server} (`iomux serve --backend B --cpu {server}`, \
             `iomux peer --server NAME --cpu {server}`), the load (`iomux load`, backend {}, one thread) on CPU \
             {load}, and so do the lab's sampling thread and perf during a cell.",
            p.load_backend
        ),
        None => format!(
            "This machine has one CPU, so nothing is pinned: every server runs on one thread, and it shares \
             the CPU with the load (`iomux load`, backend {}, one thread) and the lab's sampling.",
            p.load_backend
        ),
    };
    let syscalls = match p.perf_seconds {
        Some(s) => format!(
            "`perf stat -e raw_syscalls:sys_enter -p PID` over the window, in one more run of each cell ({s} s of \
             load; perf slows every syscall, so that run's times are not used)"
        ),
        None => "not measured, so the column is empty for every server: perf is not available here, and no count \
                 of the servers' own is comparable (iomux's covers its whole run, connecting and closing included; \
                 the peers keep none)"
            .into(),
    };
    format!(
        "{placement} {}-byte messages. Every server's listening socket has TCP_NODELAY, which the connections it \
         accepts inherit. Each cell starts a fresh server; the load connects (not measured), then sends for {} s \
         with no warm-up. The window runs from the load's start of measuring to the answer to its last message: \
         echoes/s and both sides' CPU are taken over it. Without a warm-up, a connection's first-round costs fall \
         in the window. CPU is user + system time of the whole process, read from outside the same way for every \
         server (its CPU clock, every 2 ms; read from another process that clock can lag by up to one scheduler \
         tick at each edge of the window). The load's CPU is its own report over the same window. Each round runs \
         every cell once, the servers in the order of a row of a Williams design (none always first, none always \
         after the same one); {} rounds first, then more for the cells of undecided claims. Cells: median ± half \
         its 95% interval. Syscalls per echo: {syscalls}. RSS: the server's VmRSS at the end of the window. \
         Bottleneck: the side(s) using at least {:.0}% of one CPU over the window. Open loop: the load sends on a \
         {} us grid; a run whose echoes/s fell below {:.0}% of {} or whose load was saturated is left out of the \
         claims. The last column is iomux's best CPU per echo in the scenario over this server's (below 1: iomux \
         spends less).",
        p.msg_size,
        p.seconds,
        p.rounds.first_rounds,
        p.saturated_at * 100.0,
        p.open_tick_us,
        p.sustained_at * 100.0,
        thousands(p.open_rate),
    )
}

pub(super) fn svg(env: &Envelope<Params, Arm, Run>) -> CliResult<String> {
    let p = &env.params;
    let groups: Vec<String> = p.scenarios.iter().map(Scenario::name).collect();
    let series: Vec<plot::BarSeries> = p
        .servers
        .iter()
        .map(|&server| {
            let arms = p.scenarios.iter().map(|&scenario| Arm { server, scenario, perf: false });
            plot::BarSeries::of(server.name(), env, arms, |r| r.cpu_us_per_echo)
        })
        .collect();
    plot::grouped_bars(
        "E5: server CPU per echo (median, whiskers its 95% interval)",
        &format!(
            "scenario: closed-N = N connections, closed loop; open-N = N connections at {} msgs/s",
            thousands(OPEN_RATE)
        ),
        "server CPU per echo (µs, user + system)",
        &groups,
        &series,
    )
}
