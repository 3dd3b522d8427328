//! What an envelope records of the machine: its description, the noise
//! of other processes, and the CPUs whose placement is read. Data only:
//! the rig reads them (`rig::machine`, `rig::noise`, `rig::placement`).

use serde::{Deserialize, Serialize};

pub const CPUS: (usize, usize) = (0, 1);

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

impl Machine {
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

/// What others used over one stretch of time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Noise {
    pub seconds: f64,
    /// Others' CPU seconds per second (1.0 = a whole CPU), steal included.
    pub other_cpu_share: f64,
    pub steal_share: f64,
    /// Of others' share, softirq time: network work, which an experiment
    /// whose own traffic causes it may count as its own (E8).
    #[serde(default)]
    pub softirq_share: f64,
    /// User-space processes outside the bench alone, steal included: the
    /// others of an experiment whose kernel work (softirq, kernel threads,
    /// interrupts charged to no process) is all its own (E8).
    #[serde(default)]
    pub user_space_share: f64,
    /// The busiest one-second window's share.
    pub peak_other_cpu_share: f64,
    /// When that window began, in seconds from the experiment's start: to
    /// find what ran then.
    #[serde(default)]
    pub peak_at_s: f64,
    /// What the bench itself used, for scale.
    pub own_cpu_share: f64,
    pub mean_threshold: f64,
    pub peak_threshold: f64,
    pub busy: bool,
}
