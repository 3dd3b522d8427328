//! E1's page: the rates beside the book's figures, and the plot.

use super::*;

impl Shown for SyscallRate {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let book = |n: usize| p.book.iter().find(|b| b.fds == n);
        let mut view = View {
            intro: vec![
                format!(
                    "Each cell: median of its runs of {} s, ± half its 95% interval; zero timeout, nothing ready. \
                     The book columns are the published figures. raw-* and null-syscall (getppid) are loops \
                     written directly on glibc; mio and polling are the crates. The library issues the syscall \
                     instruction itself (through rustix), without glibc's cancellation-point wrapper around \
                     epoll_wait/poll/select; its waits are epoll_pwait, ppoll and pselect6 with no signal mask, \
                     the calls every architecture has. The bench has more than one thread (its noise monitor), \
                     so glibc's wrapper, a cancellation point, switches the thread to asynchronous cancellation \
                     and back around each syscall (two atomic updates of the thread's cancel state), which the \
                     library's call does not do; in a single-threaded process glibc skips it too (see \
                     docs/experiments/syscall-rate.md for the perf profile).",
                    p.seconds_per_run
                ),
                library_against_raw(env),
            ],
            ..View::default()
        };
        let mut header = vec!["fds".to_string(), "book poll()".into(), "book epoll_wait()".into()];
        header.extend(Subject::ALL.iter().map(|s| s.name().to_string()));
        let mut rates = TableView { caption: "Empty waits per second:".into(), header, rows: Vec::new() };
        let book_cells = |n: usize| {
            [
                book(n).map_or(String::new(), |b| thousands(b.poll_calls_per_sec)),
                book(n).map_or(String::new(), |b| thousands(b.epoll_calls_per_sec)),
            ]
        };
        for &n in &p.fds {
            let mut row = vec![thousands(n as f64)];
            row.extend(book_cells(n));
            for subject in Subject::ALL {
                let arm = Arm { fds: n, subject };
                row.push(match env.note(&arm) {
                    Some(why) => format!("n/a {}", view.footnote(&format!("{arm}: {why}"))),
                    None => shown(env.estimate(&arm, |s| s.calls_per_sec)),
                });
            }
            rates.rows.push(row);
        }
        for (n, why) in &p.not_possible {
            let mut row = vec![thousands(*n as f64)];
            row.extend(book_cells(*n));
            let cell = format!("n/a {}", view.footnote(&format!("{} fds: {why}", thousands(*n as f64))));
            row.extend(Subject::ALL.iter().map(|_| cell.clone()));
            rates.rows.push(row);
        }
        let library: Vec<Subject> = Subject::ALL.into_iter().filter(|s| s.is_library()).collect();
        let mut per_wait = TableView {
            caption: "Syscalls per wait, counted by the library (io_uring: an empty wait with a zero timeout reads \
                      the shared completion ring and needs no syscall; raw-uring-enter shows what one \
                      io_uring_enter costs):"
                .into(),
            header: std::iter::once("fds".to_string()).chain(library.iter().map(|s| s.name().to_string())).collect(),
            rows: Vec::new(),
        };
        for &n in &p.fds {
            let mut row = vec![thousands(n as f64)];
            for &subject in &library {
                let (calls, syscalls) =
                    env.kept(&Arm { fds: n, subject }).fold((0u64, 0u64), |(c, s), x| (c + x.calls, s + x.syscalls));
                row.push(if calls == 0 { "n/a".into() } else { format!("{:.3}", syscalls as f64 / calls as f64) });
            }
            per_wait.rows.push(row);
        }
        view.tables = vec![rates, per_wait];

        let mut series: Vec<Series> = Subject::ALL
            .iter()
            .map(|&subject| Series {
                name: subject.name().into(),
                points: p
                    .fds
                    .iter()
                    .map(|&n| {
                        let e = env.estimate(&Arm { fds: n, subject }, |s| s.calls_per_sec);
                        (n as f64, e.map_or(f64::NAN, |e| e.median))
                    })
                    .collect(),
                published: false,
            })
            .collect();
        series.push(Series {
            name: "book-poll".into(),
            points: p.book.iter().map(|b| (b.fds as f64, b.poll_calls_per_sec)).collect(),
            published: true,
        });
        series.push(Series {
            name: "book-epoll".into(),
            points: p.book.iter().map(|b| (b.fds as f64, b.epoll_calls_per_sec)).collect(),
            published: true,
        });
        // Two panels: in one, 12 lines hid those that run level with each other.
        let (raw, ours): (Vec<Series>, Vec<Series>) = series
            .into_iter()
            .partition(|s| s.published || s.name.starts_with("raw-") || s.name == Subject::NullSyscall.name());
        let axes = Axes {
            title: "E1: empty waits per second vs registered fds",
            x_label: "registered fds (N)",
            y_label: "empty waits per second",
            x_log: true,
            y_log: true,
        };
        view.svg = Some(plot::line_panels(
            &axes,
            &[
                plot::LinePanel { title: "iomux Poller::wait, mio, polling", series: &ours },
                plot::LinePanel { title: "raw syscall loops, the book's figures (dashed)", series: &raw },
            ],
        )?);
        Ok(view)
    }
}

/// What this run measured of the library's epoll wait against the raw
/// glibc loop, mio and getppid, at the fewest and the most fds: computed
/// from the run's medians, never written in advance.
fn library_against_raw(env: &Envelope<Params, Arm, Sample>) -> String {
    let rate =
        |fds: usize, subject: Subject| env.estimate(&Arm { fds, subject }, |s| s.calls_per_sec).map(|e| e.median);
    let compare = |x: f64, y: f64| {
        let r = x / y;
        if (r - 1.0).abs() < 0.05 {
            format!("level with ({r:.2}x)")
        } else if r > 1.0 {
            format!("{:.0}% above ({r:.2}x)", (r - 1.0) * 100.0)
        } else {
            format!("{:.0}% below ({r:.2}x)", (1.0 - r) * 100.0)
        }
    };
    let mut said = Vec::new();
    let (fewest, most) = (env.params.fds.iter().min(), env.params.fds.iter().max());
    for &n in fewest.into_iter().chain(most.filter(|m| Some(*m) != fewest)) {
        let Some(library) = rate(n, Subject::Epoll) else { continue };
        let mut parts = Vec::new();
        if let Some(raw) = rate(n, Subject::RawEpoll) {
            parts.push(format!("{} the raw glibc epoll_wait loop", compare(library, raw)));
        }
        if let Some(mio) = rate(n, Subject::Mio) {
            parts.push(format!("{} mio", compare(library, mio)));
        }
        if !parts.is_empty() {
            said.push(format!(
                "at {} fd{}, {}",
                thousands(n as f64),
                if n == 1 { "" } else { "s" },
                parts.join(" and ")
            ));
        }
    }
    let mut text = match said.is_empty() {
        true => "This run did not measure the library's epoll wait beside the raw loop.".to_string(),
        false => format!("This run measured the library's epoll wait (empty waits per second) {}.", said.join("; ")),
    };
    let one = fewest.copied().unwrap_or(1);
    if let (Some(epoll), Some(getppid)) = (rate(one, Subject::RawEpoll), rate(one, Subject::NullSyscall)) {
        text += &format!(
            " The raw epoll wait ran {} getppid, the cheapest syscall loop, at {} fd{}.",
            compare(epoll, getppid),
            thousands(one as f64),
            if one == 1 { "" } else { "s" }
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::harness::envelope::{Envelope, NoiseSummary, SCHEMA};
    use crate::lab::harness::trial::{Measured, Quiet};

    /// An E1 result with these waits per second at 1 and 100 fds.
    fn measured(rates: &[(Subject, f64)]) -> Envelope<Params, Arm, Sample> {
        let params = Params {
            fds: vec![1, 100],
            not_possible: Vec::new(),
            seconds_per_run: 0.1,
            rounds: Rounds::fixed(6, 0.0),
            timeout: 0,
            book: Vec::new(),
        };
        let arms: Vec<Arm> =
            [1, 100].into_iter().flat_map(|fds| rates.iter().map(move |r| Arm { fds, subject: r.0 })).collect();
        let mut trial: Trial<Arm, Sample> = Trial::new(&Quiet, "e1", std::time::Duration::ZERO);
        for _ in 0..6 {
            let mut measure = |a: &Arm| -> Measured<Sample> {
                let rate = rates.iter().find(|r| r.0 == a.subject).map_or(f64::NAN, |r| r.1);
                Ok(Ok(Sample { calls_per_sec: rate, calls: 1, syscalls: 1 }))
            };
            trial.round(&arms, &mut measure).unwrap();
        }
        let (takes, unmeasurable) = trial.finish();
        Envelope {
            experiment: "syscall-rate".into(),
            schema: SCHEMA,
            full: false,
            commit: String::new(),
            machine: Default::default(),
            params,
            published: String::new(),
            claims: Vec::new(),
            figures: Vec::new(),
            noise: NoiseSummary::of(6, &takes, None),
            takes,
            unmeasurable,
        }
    }

    #[test]
    fn the_page_says_what_this_run_measured_of_the_library_against_raw_loops() {
        let env = measured(&[
            (Subject::Epoll, 10_300_000.0),
            (Subject::RawEpoll, 8_500_000.0),
            (Subject::Mio, 10_100_000.0),
            (Subject::NullSyscall, 12_000_000.0),
        ]);
        let text = library_against_raw(&env);
        assert!(
            text.contains("at 1 fd, 21% above (1.21x) the raw glibc epoll_wait loop and level with (1.02x) mio"),
            "{text}"
        );
        assert!(text.contains("at 100 fds,"), "{text}");
        assert!(text.contains("The raw epoll wait ran 29% below (0.71x) getppid"), "{text}");
        // Nothing measured: no claim about it.
        let none = library_against_raw(&measured(&[(Subject::Poll, 1.0)]));
        assert_eq!(none, "This run did not measure the library's epoll wait beside the raw loop.");
    }
}
