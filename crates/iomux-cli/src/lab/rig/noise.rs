//! The noise guard: how much CPU the rest of the machine used while an
//! experiment ran. A busy neighbour slows some cells more than others and
//! turns a ratio into nonsense (a loaded run once made epoll's time among
//! 10,240 idle connections 0.83x its time among none), so a verdict that
//! a claim does not hold is given only when the machine was quiet.
//!
//! Others' CPU = all CPUs' non-idle time (/proc/stat) minus what this
//! process and every process under it used. Time a hypervisor took from
//! our CPUs to run other guests (steal) is non-idle and not ours, so it
//! counts as others' too. Sampled every [`PERIOD`] by a thread, so the
//! busiest second of an experiment shows as well as its mean.

pub use crate::lab::harness::facts::Noise;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the machine is read. One reading walks /proc (a few hundred
/// small files: about a millisecond of this process's own CPU, which it
/// subtracts like the rest of its own use).
const PERIOD: Duration = Duration::from_millis(250);

/// Window for the busiest-moment figure: short enough to catch a burst
/// that spoils one cell, long enough to hold several readings at the
/// 10 ms resolution of /proc's clock ticks.
const WINDOW: Duration = Duration::from_secs(1);

/// Others' mean CPU over an experiment above which its verdicts are
/// inconclusive, in CPUs (1.0 = one whole CPU). Measured here with
/// scripts/noise-calibration (docs/noise.md): quiet calibration runs read
/// 0.015-0.033 and a whole quiet bench 0.016-0.047 (little margin); at
/// 0.127 (stress-ng at 5% on both CPUs) E2's epoll flatness crossed its
/// bound, in one run per level.
pub const MEAN_THRESHOLD: f64 = 0.05;

/// The same for the busiest second: a burst that lasts one cell can spoil
/// that cell's figure while barely moving the mean. Quiet calibration
/// runs' busiest second read at most 0.093, a whole quiet bench's 0.241.
pub const PEAK_THRESHOLD: f64 = 0.30;

/// USER_HZ: /proc/stat and /proc/PID/stat count in ticks of 1/100 s (a
/// fixed part of Linux's ABI, whatever the kernel's own HZ).
const TICK_S: f64 = 0.01;

#[derive(Clone, Copy, Debug)]
struct Reading {
    at: Instant,
    /// All CPUs' idle + iowait time since boot.
    idle_s: f64,
    /// Online CPUs (the `cpuN` lines).
    cpus: f64,
    steal_s: f64,
    /// All CPUs' softirq time (sampled once a tick): the network stack's
    /// work, wherever it ran (ksoftirqd included).
    softirq_s: f64,
    /// This process and its descendants, the reaped ones included.
    own_s: f64,
    /// User-space processes outside the bench (their exact clocks, reaped
    /// children included): kernel threads and work charged to no process
    /// left out.
    foreign_s: f64,
}

/// (idle + iowait, steal, softirq, online CPUs) from /proc/stat, whose
/// first line is `cpu user nice system idle iowait irq softirq steal ...`.
///
/// Busy time is taken as the wall time of every CPU minus idle, not as the
/// sum of user, system and the rest: on a tickless kernel idle and iowait
/// are measured exactly (the kernel clocks each idle stretch), while the
/// others are sampled once a tick (4 ms here) and miss work that runs
/// between ticks. Measured here, an open loop that wakes every millisecond
/// showed 4-16% busy by the tick fields while its two processes used 80%
/// of a CPU by their own exact clocks: the bench's own work then turned
/// into "others" in the next second's sums.
fn machine_idle() -> Option<(f64, f64, f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let field = |i: usize| f.get(i).copied().unwrap_or(0.0);
    let cpus = stat.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")).count();
    Some(((field(3) + field(4)) * TICK_S, field(7) * TICK_S, field(6) * TICK_S, cpus as f64))
}

/// One /proc/PID/stat: its parent, its own CPU seconds (user + system,
/// all threads) and its reaped children's (cutime + cstime). The command
/// name in parentheses may hold spaces, so fields count from the last ')'.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stat {
    ppid: u32,
    own_s: f64,
    reaped_s: f64,
    /// A kernel thread (PF_KTHREAD in the flags).
    kernel: bool,
}

fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... flags(6) ... utime(11) stime(12)
    // cutime(13) cstime(14).
    const PF_KTHREAD: u64 = 0x0020_0000;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).map(|t| t * TICK_S);
    let flags: u64 = f.get(6)?.parse().ok()?;
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        own_s: ticks(11)? + ticks(12)?,
        reaped_s: ticks(13)? + ticks(14)?,
        kernel: flags & PF_KTHREAD != 0,
    })
}

fn stat_of(pid: u32) -> Option<Stat> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|t| parse_stat(&t))
}

/// One walk of /proc: the CPU time of `root` and everything under it, the
/// reaped-children figure of each process in the tree as the walk read it
/// (any of them may have had a child the walk could no longer read), and
/// the CPU time of the user-space processes outside the tree.
fn walk_tree(root: u32) -> (f64, Vec<(u32, f64)>, f64) {
    let Ok(dir) = std::fs::read_dir("/proc") else { return (0.0, Vec::new(), 0.0) };
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut stats: HashMap<u32, Stat> = HashMap::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        // A process may exit between listing and reading: skip it.
        let Some(stat) = stat_of(pid) else { continue };
        children.entry(stat.ppid).or_default().push(pid);
        stats.insert(pid, stat);
    }
    let (mut total, mut parents, mut stack) = (0.0, Vec::new(), vec![root]);
    while let Some(pid) = stack.pop() {
        let Some(stat) = stats.get(&pid) else { continue };
        total += stat.own_s + stat.reaped_s;
        parents.push((pid, stat.reaped_s));
        stack.extend(children.get(&pid).into_iter().flatten());
    }
    let ours: std::collections::HashSet<u32> = parents.iter().map(|p| p.0).collect();
    let foreign = stats
        .iter()
        .filter(|(pid, stat)| !stat.kernel && !ours.contains(pid))
        .map(|(_, stat)| stat.own_s + stat.reaped_s)
        .sum();
    (total, parents, foreign)
}

/// CPU time of `root` and everything under it. A child's time is either
/// its own (alive) or inside its parent's reaped-children figure (waited
/// for), so summing the live tree counts each exactly once, provided no
/// child is reaped during the walk: one reaped after its parent was read
/// but before its own entry would vanish from the sum (or, read before its
/// parent, count twice), making a second of "others" out of the bench's
/// own work. So a walk during which the reaped figure of any process of
/// the tree moved is taken again.
fn tree_cpu_s(root: u32) -> (f64, f64) {
    let (mut total, mut foreign) = (0.0, 0.0);
    for _ in 0..5 {
        let before = stat_of(root).map(|s| s.reaped_s);
        let (sum, parents, others) = walk_tree(root);
        (total, foreign) = (sum, others);
        let root_steady = parents.iter().find(|p| p.0 == root).is_none_or(|p| Some(p.1) == before);
        if root_steady && parents.iter().all(|&(pid, reaped)| stat_of(pid).is_none_or(|s| s.reaped_s == reaped)) {
            break;
        }
    }
    (total, foreign)
}

fn read_now() -> Option<Reading> {
    let (own_s, foreign_s) = tree_cpu_s(std::process::id());
    let (idle_s, steal_s, softirq_s, cpus) = machine_idle()?;
    Some(Reading { at: Instant::now(), idle_s, cpus, steal_s, softirq_s, own_s, foreign_s })
}

impl Noise {
    /// From readings in time order; None with fewer than two.
    fn from_readings(r: &[Reading]) -> Option<Noise> {
        let (first, last) = (r.first()?, r.last()?);
        let secs = last.at.duration_since(first.at).as_secs_f64();
        if r.len() < 2 || secs <= 0.0 {
            return None;
        }
        let others = |a: &Reading, b: &Reading| {
            let d = b.at.duration_since(a.at).as_secs_f64();
            // Ticks land on either side of a reading: a short span can
            // read slightly below zero.
            let busy = d * b.cpus - (b.idle_s - a.idle_s);
            (busy - (b.own_s - a.own_s)).max(0.0) / d
        };
        let (mut peak, mut peak_at_s) = (0.0, 0.0);
        for (i, a) in r.iter().enumerate() {
            if let Some(b) = r[i..].iter().find(|b| b.at.duration_since(a.at) >= WINDOW) {
                if others(a, b) > peak {
                    (peak, peak_at_s) = (others(a, b), a.at.duration_since(first.at).as_secs_f64());
                }
            }
        }
        let mean = others(first, last);
        // A stretch shorter than a window: its mean is its busiest second.
        let peak = if secs < WINDOW.as_secs_f64() { mean } else { peak };
        Some(Noise {
            seconds: secs,
            other_cpu_share: mean,
            steal_share: (last.steal_s - first.steal_s) / secs,
            softirq_share: (last.softirq_s - first.softirq_s) / secs,
            user_space_share: ((last.foreign_s - first.foreign_s) + (last.steal_s - first.steal_s)).max(0.0) / secs,
            peak_other_cpu_share: peak,
            peak_at_s,
            own_cpu_share: (last.own_s - first.own_s) / secs,
            mean_threshold: MEAN_THRESHOLD,
            peak_threshold: PEAK_THRESHOLD,
            busy: mean > MEAN_THRESHOLD || peak > PEAK_THRESHOLD,
        })
    }

    /// "N% of a CPU", the way verdicts say it.
    pub fn describe(&self) -> String {
        format!(
            "other processes used {:.0}% of a CPU on average, {:.0}% in the busiest second ({:.0} s in){} \
             (the bench itself {:.0}%)",
            self.other_cpu_share * 100.0,
            self.peak_other_cpu_share * 100.0,
            self.peak_at_s,
            if self.steal_share > 0.005 { format!(", steal {:.0}%", self.steal_share * 100.0) } else { String::new() },
            self.own_cpu_share * 100.0
        )
    }

    /// One Markdown paragraph for an experiment's page.
    pub fn markdown(noise: Option<&Noise>) -> String {
        match noise {
            Some(n) if n.busy => format!(
                "**Machine busy** while this ran: {}. Above the guard's {:.0}% mean / {:.0}% busiest-second \
                 thresholds, so its verdicts are inconclusive: re-run on a quiet machine.\n\n",
                n.describe(),
                n.mean_threshold * 100.0,
                n.peak_threshold * 100.0
            ),
            Some(n) => format!("Machine quiet while this ran: {}.\n\n", n.describe()),
            None => "Machine noise: not measured (/proc/stat unreadable), so no verdict is final.\n\n".into(),
        }
    }
}

struct Shared {
    stop: AtomicBool,
    readings: Mutex<Vec<Reading>>,
}

/// Reads the machine every [`PERIOD`] until dropped.
pub struct Monitor {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Whether samples read the CPUs' placement (and wait for it).
    placement: bool,
}

impl Monitor {
    pub fn start() -> Monitor {
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), readings: Mutex::new(Vec::new()) });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("noise-guard".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Relaxed) {
                    if let Some(r) = read_now() {
                        s.readings.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    }
                    std::thread::park_timeout(PERIOD);
                }
            })
            .ok();
        Monitor { shared, thread, placement: true }
    }

    /// Without placement readings: for a smoke run, whose figures are not
    /// measurements, so waiting for the CPUs to be placed close, or
    /// measuring a sample again, only costs time.
    pub fn without_placement(mut self) -> Monitor {
        self.placement = false;
        self
    }

    /// What others used from `since` until now (a fresh reading ends it).
    pub fn since(&self, since: Instant) -> Option<Noise> {
        let mut readings = self.shared.readings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = read_now() {
            readings.push(r);
        }
        let from = readings.partition_point(|r| r.at < since).saturating_sub(1);
        Noise::from_readings(&readings[from..])
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

use crate::lab::harness::trial::{Meter, Placement};

impl Meter for Monitor {
    fn others_since(&self, since: Instant) -> Option<f64> {
        self.since(since).map(|n| n.other_cpu_share)
    }

    fn placement(&self) -> Option<Placement> {
        if !self.placement {
            return None;
        }
        crate::lab::rig::placement::read().map(|(ns, closest_ns)| Placement { ns, closest_ns })
    }
}

/// The machine's noise with the kernel's work counted as the bench's own:
/// for an experiment whose own traffic makes the kernel's network work
/// (E8's emulated links, run in softirq, ksoftirqd and interrupts charged
/// to no process of the bench). Others are the user-space processes
/// outside the bench, by their own clocks, and steal. The CPUs' placement
/// is read through the trial's main meter, so this one does not read it.
pub struct NetworkIsOwn<'a>(pub &'a Monitor);

impl Meter for NetworkIsOwn<'_> {
    fn others_since(&self, since: Instant) -> Option<f64> {
        self.0.since(since).map(|n| n.user_space_share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading of a 2-CPU machine that has been busy `busy_s` in all.
    fn at(base: Instant, ms: u64, busy_s: f64, own_s: f64) -> Reading {
        let idle_s = 2.0 * ms as f64 / 1000.0 - busy_s;
        Reading {
            at: base + Duration::from_millis(ms),
            idle_s,
            cpus: 2.0,
            steal_s: 0.0,
            softirq_s: 0.0,
            own_s,
            foreign_s: 0.0,
        }
    }

    #[test]
    fn others_are_busy_time_minus_our_own() {
        let t = Instant::now();
        // 4 s: the machine was busy 5 CPU-s, we used 4.84 of them.
        let quiet: Vec<Reading> = (0..=16).map(|i| at(t, i * 250, i as f64 * 0.3125, i as f64 * 0.3025)).collect();
        let n = Noise::from_readings(&quiet).unwrap();
        assert!((n.other_cpu_share - 0.04).abs() < 1e-9, "{n:?}");
        assert!((n.peak_other_cpu_share - 0.04).abs() < 1e-9, "{n:?}");
        assert!((n.own_cpu_share - 1.21).abs() < 1e-9, "{n:?}");
        assert!(!n.busy, "{n:?}");
    }

    #[test]
    fn a_one_second_burst_trips_the_peak_though_the_mean_stays_low() {
        let t = Instant::now();
        let mut busy = 0.0;
        let mut r = Vec::new();
        for i in 0..=40u64 {
            r.push(at(t, i * 250, busy, 0.0));
            // One second of a whole CPU used by someone else, in 10 s.
            busy += if (20..24).contains(&i) { 0.25 } else { 0.0 };
        }
        let n = Noise::from_readings(&r).unwrap();
        assert!((n.other_cpu_share - 0.1).abs() < 1e-9, "{n:?}");
        assert!((n.peak_other_cpu_share - 1.0).abs() < 1e-9, "{n:?}");
        assert!((n.peak_at_s - 5.0).abs() < 1e-9, "the burst began 5 s in: {n:?}");
        assert!(n.busy);
    }

    #[test]
    fn steal_counts_as_others() {
        let t = Instant::now();
        let r = [
            // 2 s on 2 CPUs, 2.4 s idle: 1.6 s busy, of it 0.6 s stolen.
            Reading { at: t, idle_s: 0.0, cpus: 2.0, steal_s: 0.0, softirq_s: 0.0, own_s: 0.0, foreign_s: 0.0 },
            Reading {
                at: t + Duration::from_secs(2),
                idle_s: 2.4,
                cpus: 2.0,
                steal_s: 0.6,
                softirq_s: 0.2,
                own_s: 1.0,
                foreign_s: 0.1,
            },
        ];
        let n = Noise::from_readings(&r).unwrap();
        assert!((n.other_cpu_share - 0.3).abs() < 1e-9 && (n.steal_share - 0.3).abs() < 1e-9, "{n:?}");
        // User space outside the bench: 0.1 s, plus the 0.6 s stolen.
        assert!((n.user_space_share - 0.35).abs() < 1e-9, "{n:?}");
        assert!(n.busy);
    }

    #[test]
    fn stat_lines_parse_with_spaces_in_the_name() {
        let line = "42 (a b) c) S 7 42 42 0 -1 4194560 100 0 0 0 120 30 5 5 20 0 1 0 100 0 0";
        assert_eq!(parse_stat(line), Some(Stat { ppid: 7, own_s: 1.5, reaped_s: 0.1, kernel: false }));
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 3 4 0 0 20 0 1 0 0 0 0";
        assert!(parse_stat(kthread).is_some_and(|s| s.kernel), "PF_KTHREAD (0x200000) is set in 2129984");
    }

    #[test]
    fn reaped_children_never_vanish_from_our_time() {
        // Children that spin, then are reaped, while the tree is read in a
        // loop: a walk that a reap cuts through must not lose a child's
        // CPU time (a dip of about a child's 0.15 s).
        let spawner = std::thread::spawn(|| {
            for _ in 0..8 {
                let status = std::process::Command::new("timeout")
                    .args(["0.15", "sh", "-c", "while :; do :; done"])
                    .status()
                    .unwrap();
                assert_eq!(status.code(), Some(124));
            }
        });
        let (mut last, mut worst_dip, mut readings) = (tree_cpu_s(std::process::id()).0, 0.0f64, 0);
        while !spawner.is_finished() {
            let now = tree_cpu_s(std::process::id()).0;
            worst_dip = worst_dip.max(last - now);
            last = now;
            readings += 1;
        }
        spawner.join().unwrap();
        // Ticks are 10 ms, and a live reading may round either way.
        assert!(worst_dip < 0.05, "our time fell by {worst_dip:.2} s between readings ({readings} readings)");
    }

    #[test]
    fn our_own_and_our_childrens_cpu_count_as_ours() {
        let before = tree_cpu_s(std::process::id()).0;
        crate::os::spin_cpu(Duration::from_millis(500));
        // A grandchild (under timeout) that spins, then is reaped.
        let status =
            std::process::Command::new("timeout").args(["0.5", "sh", "-c", "while :; do :; done"]).status().unwrap();
        assert_eq!(status.code(), Some(124), "timeout stops the loop");
        let used = tree_cpu_s(std::process::id()).0 - before;
        // 0.5 s of our own spin and 0.5 s of the child's, on a machine that
        // may be shared: most of it must be found.
        assert!(used > 0.6, "found only {used:.2} CPU-s of about 1.0");
    }

    #[test]
    fn a_process_outside_the_bench_counts_as_user_space_others() {
        let before = tree_cpu_s(std::process::id()).1;
        let dir = tempfile::tempdir().unwrap();
        let done = dir.path().join("done");
        // Orphaned at once (its parent shell exits): no longer ours. It
        // spins for 1 CPU-s (RLIMIT_CPU), not 1 s of a clock: tests running
        // beside it on 2 CPUs must not shrink what there is to find.
        let orphan = format!("((ulimit -t 1; exec sh -c 'while :; do :; done'); touch {}) &", done.display());
        let status = std::process::Command::new("sh").args(["-c", &orphan]).status().unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(done.exists(), "the orphan did not finish its 1 CPU-s in 30 s");
        let foreign = tree_cpu_s(std::process::id()).1 - before;
        assert!(foreign > 0.6, "found only {foreign:.2} CPU-s of the orphan's 1.0");
    }
}
