//! What machine a result was measured on, for every report.

use serde::{Deserialize, Serialize};

/// Fields an older file lacks read as empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Machine {
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_bytes: u64,
    /// RLIMIT_NOFILE (soft, after raising it to the hard limit).
    pub nofile: u64,
    pub nofile_hard: u64,
    pub io_uring_disabled: Option<String>,
}

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
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024);
        let (nofile, nofile_hard) = crate::os::nofile_limit();
        Machine {
            kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
            nofile,
            nofile_hard,
            io_uring_disabled: read_trim("/proc/sys/kernel/io_uring_disabled"),
        }
    }

    /// One line for the top of a table.
    pub fn summary(&self) -> String {
        format!(
            "Linux {}, {} x {}, {:.1} GiB, RLIMIT_NOFILE {}",
            self.kernel,
            self.cpus,
            self.cpu_model,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.nofile
        )
    }
}
