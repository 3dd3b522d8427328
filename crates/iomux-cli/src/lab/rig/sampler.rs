//! Processes watched from outside while a load runs: each one's CPU time
//! and resident memory, sampled every few milliseconds on the Unix clock
//! (the clock the load's JSON gives its windows on), so that the window
//! the load reports only afterwards can be cut out of the samples.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often every watched process is read; one read costs about a
/// microsecond. The period bounds how far a window's edge is from the
/// samples on either side of it. The clock itself counts in ns but, read
/// from another process, can lag: the kernel brings a thread's runtime up
/// to date only at a scheduler tick or event (a block, a preemption), so a
/// reading misses up to one tick (1/CONFIG_HZ) of a thread running on
/// another CPU at that moment; up to a tick at each edge of a window.
const PERIOD: Duration = Duration::from_millis(2);

/// Resident memory is read every this many samples (a /proc file, not a
/// clock): often enough to have a reading near any window's end.
const RSS_EVERY: u32 = 5;

/// Now, in Unix seconds.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// A quantity over time: (Unix seconds, value), in time order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline(Vec<(f64, f64)>);

impl Timeline {
    /// Adds a sample; one older than the last is dropped (a clock step).
    pub fn push(&mut self, t: f64, v: f64) {
        if self.0.last().is_none_or(|&(last, _)| t >= last) {
            self.0.push((t, v));
        }
    }

    /// The value at `t`, linear between the samples on either side; None
    /// outside the samples.
    pub fn at(&self, t: f64) -> Option<f64> {
        let i = self.0.partition_point(|&(x, _)| x < t);
        let &(t1, v1) = self.0.get(i)?;
        if t1 == t {
            return Some(v1);
        }
        let &(t0, v0) = self.0.get(i.checked_sub(1)?)?;
        Some(v0 + (v1 - v0) * (t - t0) / (t1 - t0))
    }

    /// The increase of a cumulative quantity over `(start, end)`.
    pub fn over(&self, (start, end): (f64, f64)) -> Option<f64> {
        Some(self.at(end)? - self.at(start)?)
    }

    /// The first sample's value.
    pub fn first(&self) -> Option<f64> {
        self.0.first().map(|&(_, v)| v)
    }

    /// The times of the samples, in order.
    pub fn times(&self) -> Vec<f64> {
        self.0.iter().map(|&(t, _)| t).collect()
    }

    /// The last sample at or before `t`.
    pub fn last_until(&self, t: f64) -> Option<f64> {
        let i = self.0.partition_point(|&(x, _)| x <= t);
        i.checked_sub(1).map(|i| self.0[i].1)
    }
}

/// What was read of one process.
#[derive(Clone, Debug, Default)]
pub struct Readings {
    pub pid: u32,
    /// CPU seconds used since it started, all threads (user + system).
    pub cpu_s: Timeline,
    /// Resident memory (VmRSS), bytes.
    pub rss_bytes: Timeline,
    /// Set once a read fails: the process is gone.
    gone: bool,
}

impl Readings {
    fn sample(&mut self, with_rss: bool) {
        if self.gone {
            return;
        }
        let t = unix_now();
        match crate::os::process_cpu(self.pid) {
            Ok(cpu) => self.cpu_s.push(t, cpu.as_secs_f64()),
            Err(_) => {
                self.gone = true;
                return;
            }
        }
        if with_rss {
            if let Some(rss) = rss_bytes(self.pid) {
                self.rss_bytes.push(t, rss as f64);
            }
        }
    }
}

/// VmRSS from /proc/PID/statm (resident pages).
fn rss_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

struct Shared {
    stop: AtomicBool,
    procs: Mutex<Vec<Readings>>,
}

impl Shared {
    fn procs(&self) -> MutexGuard<'_, Vec<Readings>> {
        // A panic elsewhere leaves readings that are still readings.
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A thread that samples every watched process until finished.
pub struct Sampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling (nothing yet), on `cpu` if given: the load's CPU,
    /// so that the server's stays the server's alone.
    pub fn start(cpu: Option<usize>) -> Sampler {
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), procs: Mutex::new(Vec::new()) });
        let inner = shared.clone();
        let thread = std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                // Unpinned, it still samples; it only shares a CPU less fairly.
                let _ = crate::os::pin_to_cpu(cpu);
            }
            let mut n: u32 = 0;
            while !inner.stop.load(Ordering::Relaxed) {
                for p in inner.procs().iter_mut() {
                    p.sample(n.is_multiple_of(RSS_EVERY));
                }
                n = n.wrapping_add(1);
                std::thread::sleep(PERIOD);
            }
        });
        Sampler { shared, thread: Some(thread) }
    }

    /// Watches `pid` from now on, with a first sample taken at once (so a
    /// process started just before has its start covered).
    pub fn watch(&self, pid: u32) {
        let mut p = Readings { pid, ..Readings::default() };
        p.sample(true);
        self.shared.procs().push(p);
    }

    /// Samples `pid` once more now (e.g. once it has exited and before it
    /// is reaped: its final CPU time).
    pub fn sample_now(&self, pid: u32) {
        for p in self.shared.procs().iter_mut().filter(|p| p.pid == pid) {
            p.sample(true);
        }
    }

    /// One last sample of each, then every process's readings.
    pub fn finish(mut self) -> Vec<Readings> {
        self.stop();
        let mut procs = std::mem::take(&mut *self.shared.procs());
        for p in &mut procs {
            p.sample(true);
        }
        procs
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_interpolates_inside_its_samples_only() {
        let mut t = Timeline::default();
        t.push(10.0, 1.0);
        t.push(12.0, 3.0);
        t.push(11.0, 9.0);
        t.push(14.0, 3.0);
        assert_eq!(t.at(11.0), Some(2.0));
        assert_eq!(t.at(12.0), Some(3.0));
        assert_eq!(t.at(9.9), None);
        assert_eq!(t.at(14.1), None);
        assert_eq!(t.over((10.0, 13.0)), Some(2.0));
        assert_eq!(t.last_until(13.5), Some(3.0));
        assert_eq!(t.last_until(9.0), None);
    }

    fn spin(d: Duration) {
        crate::os::spin_cpu(d);
    }

    #[test]
    fn a_process_clock_counts_every_thread_even_exited_ones() {
        let pid = std::process::id();
        let before = crate::os::process_cpu(pid).unwrap();
        std::thread::spawn(|| spin(Duration::from_millis(40))).join().unwrap();
        let after = crate::os::process_cpu(pid).unwrap();
        assert!(after - before >= Duration::from_millis(35), "{before:?} -> {after:?}");
        // The same total getrusage gives, to its tick.
        let u = crate::os::usage().unwrap();
        let rusage = (u.user + u.system).as_secs_f64();
        assert!((crate::os::process_cpu(pid).unwrap().as_secs_f64() - rusage).abs() < 0.02, "{after:?} vs {rusage}");
        assert!(crate::os::process_cpu(u32::MAX).is_err());
    }

    #[test]
    fn an_exited_child_reads_until_it_is_reaped() {
        use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        // Blocks until it has exited, and leaves it unreaped.
        waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOWAIT).unwrap();
        assert!(crate::os::process_cpu(child.id()).is_ok());
        child.wait().unwrap();
    }

    #[test]
    fn this_process_is_sampled() {
        let sampler = Sampler::start(None);
        sampler.watch(std::process::id());
        let start = unix_now();
        spin(Duration::from_millis(30));
        let end = unix_now();
        let procs = sampler.finish();
        let cpu = procs[0].cpu_s.over((start, end)).unwrap();
        assert!(cpu > 0.0, "{cpu}");
        assert!(procs[0].rss_bytes.last_until(end).unwrap() > 0.0);
    }
}
