//! The machine's memory while a large run holds its connections: the
//! kernel's slab (socket structures, skbs), the TCP stack's own account
//! (/proc/net/sockstat, in pages) and what the whole machine uses, sampled
//! from another thread so the peak is caught without stopping the run.

use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One reading, in bytes.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Reading {
    /// /proc/meminfo Slab.
    pub slab: u64,
    /// /proc/net/sockstat TCP mem (pages) in bytes.
    pub tcp: u64,
    /// MemTotal - MemAvailable.
    pub used: u64,
    /// /proc/net/sockstat TCP inuse: TCP sockets open on the machine.
    pub tcp_sockets: u64,
}

/// The value after `key` on sockstat's `TCP:` line.
fn sockstat_tcp(text: &str, key: &str) -> u64 {
    let Some(line) = text.lines().find(|l| l.starts_with("TCP:")) else { return 0 };
    let words: Vec<&str> = line.split_whitespace().collect();
    words.windows(2).find(|w| w[0] == key).and_then(|w| w[1].parse().ok()).unwrap_or(0)
}

impl Reading {
    pub fn now() -> Reading {
        // Unreadable: zeros. Without MemAvailable (kernels before 3.14) it
        // counts as 0, so used is MemTotal.
        let (slab, total, available) =
            crate::os::meminfo().map_or((0, 0, 0), |m| (m.slab, m.mem_total, m.mem_available.unwrap_or(0)));
        let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
        let page = rustix::param::page_size() as u64;
        Reading {
            slab,
            tcp: sockstat_tcp(&sockstat, "mem") * page,
            used: total.saturating_sub(available),
            tcp_sockets: sockstat_tcp(&sockstat, "inuse"),
        }
    }

    /// The larger of each field.
    fn max(self, o: Reading) -> Reading {
        Reading {
            slab: self.slab.max(o.slab),
            tcp: self.tcp.max(o.tcp),
            used: self.used.max(o.used),
            tcp_sockets: self.tcp_sockets.max(o.tcp_sockets),
        }
    }
}

/// Samples [`Reading`]s every 200 ms until stopped; keeps the peak of each.
pub struct Sampler {
    pub before: Reading,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Reading>,
}

impl Sampler {
    pub fn start() -> Sampler {
        let before = Reading::now();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = before;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(Reading::now());
                std::thread::sleep(Duration::from_millis(200));
            }
            peak.max(Reading::now())
        });
        Sampler { before, stop, thread }
    }

    /// The peak of every field while it ran.
    pub fn finish(self) -> Reading {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(self.before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockstat_parses() {
        let sockstat = "sockets: used 11\nTCP: inuse 7 orphan 0 tw 3 alloc 9 mem 273\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tcp(sockstat, "mem"), 273);
        assert_eq!(sockstat_tcp(sockstat, "inuse"), 7);
    }

    #[test]
    fn a_reading_sees_the_machine_memory() {
        // procfs reads /proc/meminfo in bytes (its kB times 1024).
        let r = Reading::now();
        assert!(r.slab > 0 && r.used > 0, "{r:?}");
        assert!(r.slab.is_multiple_of(1024) && r.used.is_multiple_of(1024), "{r:?}");
    }
}
