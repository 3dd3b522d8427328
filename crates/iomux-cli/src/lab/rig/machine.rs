//! Reads the machine's description (`harness::facts::Machine`) from
//! /proc, the fd limit and the CPU count.

pub use crate::lab::harness::facts::Machine;

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

impl Machine {
    /// Reads the machine's description; call after raising the fd limit.
    pub fn describe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let memory_bytes = crate::os::meminfo().map_or(0, |m| m.mem_total);
        let (nofile, nofile_hard) = crate::os::nofile_limit();
        Machine {
            kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            cpu_model,
            cpus: crate::os::cpus(),
            memory_bytes,
            nofile,
            nofile_hard,
            io_uring_disabled: read_trim("/proc/sys/kernel/io_uring_disabled"),
        }
    }
}
