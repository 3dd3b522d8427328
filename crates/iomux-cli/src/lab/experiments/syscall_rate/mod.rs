//! E1 `syscall-rate`: empty waits per second against the number of
//! registered fds (the book's poll-vs-epoll.c, seed 003).
//!
//! One pipe; its read end is duplicated N times; every copy is registered
//! for readability; nothing is ever written, so every wait finds nothing.
//! Each sample counts back-to-back waits with a zero timeout.

mod setup;
mod view;
use anyhow::{bail, Context as _};
use setup::*;

mod raw;
mod wait_peers;

use crate::lab::experiments::syscall_rate::wait_peers::{MioPeer, PollingPeer};
use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::flags::{RoundFlags, Standard};
use crate::lab::harness::stats::{median, Needed};
use crate::lab::harness::trial::{Measure, Measured, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::plot::{self, Axes, Series};
use crate::lab::render::table::thousands;
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::rig::measure::calls_per_sec;
use crate::lab::Settings;
use crate::CliResult;
use iomux::lab::PollRing;
use iomux::poller::{EpollPoller, PollPoller, SelectPoller, UringPoller};
use iomux::syscalls;
use iomux::{Events, Interest, Mode, Poller, Token};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Numbers of registered fds, comma-separated [default: 1,10,100,1000,
    /// 10000; --full: also 5000 and the largest number the open-files
    /// limit allows]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub fds: Option<Vec<usize>>,
    #[command(flatten)]
    pub rounds: RoundFlags<Standard>,
}

/// One row of the book's table.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct BookRow {
    fds: usize,
    poll_calls_per_sec: f64,
    epoll_calls_per_sec: f64,
}

/// The book's table (Linux Application Development, 2nd ed., 13.1.6).
const BOOK: [BookRow; 9] = [
    BookRow { fds: 1, poll_calls_per_sec: 310_063.0, epoll_calls_per_sec: 714_848.0 },
    BookRow { fds: 10, poll_calls_per_sec: 140_842.0, epoll_calls_per_sec: 726_108.0 },
    BookRow { fds: 100, poll_calls_per_sec: 25_866.0, epoll_calls_per_sec: 726_659.0 },
    BookRow { fds: 1_000, poll_calls_per_sec: 3_343.0, epoll_calls_per_sec: 729_072.0 },
    BookRow { fds: 5_000, poll_calls_per_sec: 612.0, epoll_calls_per_sec: 718_424.0 },
    BookRow { fds: 10_000, poll_calls_per_sec: 300.0, epoll_calls_per_sec: 730_483.0 },
    BookRow { fds: 25_000, poll_calls_per_sec: 108.0, epoll_calls_per_sec: 717_097.0 },
    BookRow { fds: 50_000, poll_calls_per_sec: 38.0, epoll_calls_per_sec: 729_746.0 },
    BookRow { fds: 100_000, poll_calls_per_sec: 18.0, epoll_calls_per_sec: 712_301.0 },
];

/// What is measured: the library's backends, the raw baselines and peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Subject {
    NullSyscall,
    RawPoll,
    Poll,
    Select,
    RawEpoll,
    Epoll,
    Mio,
    Polling,
    Uring,
    RawUringEnter,
}

impl Subject {
    const ALL: [Subject; 10] = [
        Subject::NullSyscall,
        Subject::RawPoll,
        Subject::Poll,
        Subject::Select,
        Subject::RawEpoll,
        Subject::Epoll,
        Subject::Mio,
        Subject::Polling,
        Subject::Uring,
        Subject::RawUringEnter,
    ];

    fn name(self) -> &'static str {
        match self {
            Subject::NullSyscall => "null-syscall",
            Subject::RawPoll => "raw-poll",
            Subject::Poll => "poll",
            Subject::Select => "select",
            Subject::RawEpoll => "raw-epoll",
            Subject::Epoll => "epoll",
            Subject::Mio => "mio",
            Subject::Polling => "polling",
            Subject::Uring => "uring",
            Subject::RawUringEnter => "raw-uring-enter",
        }
    }

    /// The library's own `Poller::wait`, whose syscalls the counters see.
    fn is_library(self) -> bool {
        matches!(self, Subject::Poll | Subject::Select | Subject::Epoll | Subject::Uring)
    }
}

/// One subject at one number of fds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    fds: usize,
    subject: Subject,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, {} fds", self.subject.name(), self.fds)
    }
}

/// One timed run of a subject.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    calls_per_sec: f64,
    calls: u64,
    /// Syscalls the library counted during the run (its own subjects only).
    syscalls: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    fds: Vec<usize>,
    /// Numbers of fds this machine's open-files limit does not allow, with why.
    not_possible: Vec<(usize, String)>,
    seconds_per_run: f64,
    #[serde(flatten)]
    rounds: Rounds,
    timeout: u32,
    book: Vec<BookRow>,
}

/// The fd counts a run measures, and those it cannot (with why).
#[derive(Debug)]
struct Plan {
    measured: Vec<usize>,
    impossible: Vec<(usize, String)>,
}

fn plan(args: &Args, max_fds: usize, hard_limit: u64, full: bool) -> CliResult<Plan> {
    let wanted: Vec<usize> = match &args.fds {
        Some(list) => {
            if let Some(bad) = list.iter().find(|&&n| n == 0) {
                bail!("--fds: {bad} is not a number of fds (each must be at least 1)");
            }
            list.clone()
        }
        // Quick settings leave out 5,000 and the largest N: setting up
        // many thousands of fds for every subject dominates a round.
        None if !full => BOOK.iter().map(|b| b.fds).filter(|&n| n != 5_000).collect(),
        None => {
            let mut v: Vec<usize> = BOOK.iter().map(|b| b.fds).collect();
            v.push(max_fds);
            v
        }
    };
    let mut measured: Vec<usize> = wanted.iter().copied().filter(|&n| n <= max_fds).collect();
    measured.sort_unstable();
    measured.dedup();
    let mut impossible: Vec<(usize, String)> = wanted
        .iter()
        .copied()
        .filter(|&n| n > max_fds)
        .map(|n| {
            (
                n,
                format!(
                    "needs {n} fds in one process; RLIMIT_NOFILE hard limit is {hard_limit} (at most {max_fds} here)"
                ),
            )
        })
        .collect();
    impossible.sort_by_key(|x| x.0);
    impossible.dedup_by_key(|x| x.0);
    Ok(Plan { measured, impossible })
}

pub struct SyscallRate;

/// The quantity of one round: `a`'s rate over `b`'s, median over `ns`.
fn median_ratio(ns: &[usize], a: Subject, b: Subject, r: &RoundView<Arm, Sample>) -> Option<f64> {
    let rate = |fds: usize, subject: Subject| r.get(&Arm { fds, subject }).map(|s| s.calls_per_sec);
    let ratios: Vec<f64> = ns.iter().filter_map(|&n| Some(rate(n, a)? / rate(n, b)?)).collect();
    (ratios.len() == ns.len()).then(|| median(&ratios)).flatten()
}

fn arms_of(ns: &[usize], subjects: &[Subject]) -> Vec<Arm> {
    ns.iter().flat_map(|&fds| subjects.iter().map(move |&subject| Arm { fds, subject })).collect()
}

/// `a` over `b` at `n` fds, when `n` is planned.
fn ratio_at(p: &Params, n: usize, a: Subject, b: Subject, quantity: &str, needed: Needed) -> Spec<Arm, Sample> {
    if !p.fds.contains(&n) {
        return Spec::iomux(quantity, needed, vec![], |_| None);
    }
    let (x, y) = (Arm { fds: n, subject: a }, Arm { fds: n, subject: b });
    Spec::iomux(quantity, needed, vec![x, y], move |r: &RoundView<Arm, Sample>| {
        Some(r.get(&x)?.calls_per_sec / r.get(&y)?.calls_per_sec)
    })
}

impl Experiment for SyscallRate {
    experiment_types!(Args, Params, Arm, Sample, rounds: params.rounds);

    const ENTRY: Entry = Entry::new("syscall-rate", "E1", "empty waits per second (calls/s) against registered fds")
        .smoke("--fds 1,100,1000 --budget 5");
    const PUBLISHED: &'static str = "the book's table (Linux Application Development, 2nd ed., 13.1.6): poll()'s \
                                     calls per second fall as 1/N, from 310,063 at 1 fd to 18 at 100,000; \
                                     epoll_wait()'s stay near 720,000 at every N.";

    fn plan(args: &Args, settings: &Settings) -> CliResult<Params> {
        let (_, hard) = crate::os::nofile_limit();
        let limit = crate::os::raise_nofile_limit().context("raising RLIMIT_NOFILE to its hard limit")?;
        // Every setup opens a handful of fds of its own besides the N
        // copies: the pipe's write end and one epoll/io_uring fd (or three,
        // for polling) per subject.
        const OWN_FDS: usize = 16;
        let open_now = crate::os::open_fd_count().unwrap_or(16);
        let max_fds = (limit as usize).saturating_sub(open_now + OWN_FDS).max(1);
        let Plan { measured, impossible } = plan(args, max_fds, hard, settings.full)?;
        let seconds = if settings.full { 1.0 } else { 0.1 };
        Ok(Params {
            fds: measured,
            not_possible: impossible,
            seconds_per_run: seconds,
            rounds: args.rounds.rounds(settings)?,
            timeout: 0,
            book: BOOK.to_vec(),
        })
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Sample>> {
        use Subject::*;
        let ns = p.fds.clone();
        let from_100: Vec<usize> = ns.iter().copied().filter(|&n| n >= 100).collect();
        let mut out = Vec::new();
        let over = |what: &str, set: Vec<usize>, a: Subject, b: Subject| {
            let arms = if set.is_empty() { vec![] } else { arms_of(&set, &[a, b]) };
            Spec::iomux(what, Needed::AtLeast(0.95), arms, move |r: &RoundView<Arm, Sample>| {
                median_ratio(&set, a, b, r)
            })
        };
        out.push(over("library epoll / raw epoll_wait, median over N", ns.clone(), Epoll, RawEpoll));
        out.push(over("library poll / raw poll, median over N >= 100", from_100, Poll, RawPoll));
        let flat = "library epoll at the largest N / at N = 1";
        out.push(
            match (ns.first().copied(), ns.last().copied()) {
                (Some(1), Some(l)) if l > 1 => {
                    let (a, b) = (Arm { fds: l, subject: Epoll }, Arm { fds: 1, subject: Epoll });
                    Spec::iomux(flat, Needed::AtLeast(0.8), vec![a, b], move |r: &RoundView<Arm, Sample>| {
                        Some(r.get(&a)?.calls_per_sec / r.get(&b)?.calls_per_sec)
                    })
                }
                _ => Spec::iomux(flat, Needed::AtLeast(0.8), vec![], |_| None),
            }
            .documents("epoll_wait's rate stays flat as registered fds grow"),
        );
        // The book: poll's calls per second fall as 1/N (25,866 at 100 fds,
        // 18 at 100,000: a log-log slope of 1.05); the slope from N = 100
        // to the largest N, within 0.2 of 1.
        let slope = "poll: log-log slope of time per call over N >= 100";
        out.push(
            match ns.last().copied().filter(|&l| l >= 1_000 && ns.contains(&100)) {
                Some(l) => {
                    let (a, b) = (Arm { fds: 100, subject: Poll }, Arm { fds: l, subject: Poll });
                    Spec::iomux(slope, Needed::Within(0.8, 1.2), vec![a, b], move |r: &RoundView<Arm, Sample>| {
                        let ratio = r.get(&a)?.calls_per_sec / r.get(&b)?.calls_per_sec;
                        Some(ratio.ln() / (l as f64 / 100.0).ln())
                    })
                }
                None => Spec::iomux(slope, Needed::Within(0.8, 1.2), vec![], |_| None),
            }
            .documents("poll's cost grows linearly with the number of fds"),
        );
        out.push(
            ratio_at(p, 10_000, Epoll, Poll, "library epoll / library poll at N = 10,000", Needed::AtLeast(500.0))
                .documents("at 10,000 fds epoll_wait is hundreds of times faster than poll"),
        );
        // mio calls epoll_wait; the library calls epoll_pwait (the call
        // every architecture has, as rustix does), which costs the kernel
        // about 3% more per empty wait (91.5 vs 88.9 ns measured here):
        // within 5% is par.
        out.push(ratio_at(p, 1_000, Epoll, Mio, "library epoll / mio at N = 1,000", Needed::AtLeast(0.95)));
        out.push(ratio_at(p, 1_000, Epoll, Polling, "library epoll / polling at N = 1,000", Needed::AtLeast(1.0)));
        out
    }

    fn metrics() -> Vec<Metric<Sample>> {
        vec![Metric { name: "calls/s", unit: "calls/s", higher_is_better: true, get: |s| s.calls_per_sec }]
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Sample>) -> Vec<Arm> {
        arms_of(&p.fds, &Subject::ALL)
    }

    fn rig<'a>(p: &'a Params, trial: &mut Trial<Arm, Sample>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Sample>> {
        let duration = Duration::from_secs_f64(p.seconds_per_run);
        // One N's fds at a time: all N's at once would pass the open-files
        // limit. A round takes each N's arms together, so it builds each
        // N's set-up once.
        trial.group_by(|a| a.fds as u64);
        let mut current: Option<(usize, Setup)> = None;
        Ok(Box::new(move |a: &Arm| -> Measured<Sample> {
            if current.as_ref().is_none_or(|c| c.0 != a.fds) {
                current = None;
                current = Some((a.fds, Setup::new(a.fds)?));
            }
            let Some((_, setup)) = current.as_mut() else { bail!("no setup") };
            Ok(setup.measure(a.subject, duration).map(|(calls_per_sec, calls, syscalls)| Sample {
                calls_per_sec,
                calls,
                syscalls,
            }))
        }))
    }

    /// Bare syscalls: mio and polling are not, for they share rustix and
    /// the build with iomux.
    fn reference(arm: &Arm) -> bool {
        matches!(arm.subject, Subject::NullSyscall | Subject::RawPoll | Subject::RawEpoll | Subject::RawUringEnter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_splits_possible_from_impossible() {
        let args = Args { fds: Some(vec![10, 100_000, 1, 10]), rounds: RoundFlags::given(None, Some(0.0)) };
        let Plan { measured: ns, impossible: no } = plan(&args, 19_000, 20_000, false).unwrap();
        assert_eq!(ns, vec![1, 10]);
        assert_eq!(no.len(), 1);
        assert!(no[0].1.contains("hard limit is 20000"), "{}", no[0].1);
    }

    #[test]
    fn default_plan_ends_at_the_largest_possible_n() {
        let Plan { measured: ns, impossible: no } = plan(&Args::default(), 19_970, 20_000, true).unwrap();
        assert_eq!(ns, vec![1, 10, 100, 1_000, 5_000, 10_000, 19_970]);
        assert_eq!(no.iter().map(|x| x.0).collect::<Vec<_>>(), vec![25_000, 50_000, 100_000]);
        let Plan { measured: quick, .. } = plan(&Args::default(), 19_970, 20_000, false).unwrap();
        assert_eq!(quick, vec![1, 10, 100, 1_000, 10_000]);
    }

    #[test]
    fn zero_fds_is_refused() {
        let err = plan(&Args { fds: Some(vec![0]), rounds: RoundFlags::given(None, Some(0.0)) }, 100, 100, false)
            .unwrap_err();
        assert!(err.to_string().contains("at least 1"));
    }

    #[test]
    fn a_small_run_measures_every_subject() {
        let mut setup = Setup::new(3).unwrap();
        for s in Subject::ALL {
            let (rate, calls, syscalls) = setup.measure(s, Duration::from_millis(5)).unwrap();
            assert!(rate > 0.0 && calls > 0, "{}", s.name());
            match s {
                Subject::Epoll | Subject::Poll | Subject::Select => assert_eq!(syscalls, calls, "{}", s.name()),
                Subject::Uring => assert_eq!(syscalls, 0, "empty io_uring wait with zero timeout"),
                _ => {}
            }
        }
    }
}
