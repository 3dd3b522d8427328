//! E1's page: the rates beside the book's figures, and the plot.

use super::*;

impl Shown for SyscallRate {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let book = |n: usize| p.book.iter().find(|b| b.fds == n);
        let mut view = View {
            intro: vec![format!(
                "Each cell: median of its runs of {} s, ± half its 95% interval; zero timeout, nothing ready. \
                 The book columns are the published figures. raw-* and null-syscall (getppid) are loops written \
                 directly on glibc; mio and polling are the crates. The library issues the syscall instruction \
                 itself (through rustix), skipping glibc's cancellation-point wrapper around \
                 epoll_wait/poll/select (about 10 ns a call). Its waits are epoll_pwait, ppoll and pselect6 with \
                 no signal mask, the calls every architecture has, and the kernel makes them a little dearer: \
                 epoll_pwait about 3% more than epoll_wait, ppoll a few tens of ns more than poll (it copies in \
                 a timespec), which shows at 1 fd and vanishes from 100 fds up. The two effects about cancel \
                 out: the library runs level with the raw glibc loops and with mio (which calls epoll_wait \
                 through glibc). An epoll wait with nothing ready (a lock-free emptiness check in the kernel) \
                 can beat getppid (a pid-namespace lookup).",
                p.seconds_per_run
            )],
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
