//! A CPU quota for the servers of a "server-bound" scenario: a cgroup of
//! its own (v1 `cpu` controller: `cpu.cfs_quota_us` over
//! `cpu.cfs_period_us`; v2: `cpu.max`), made by the lab and removed when
//! dropped. With every server in the same quota, and the client on a CPU
//! of its own, the client has headroom and requests/s measure the server.

use anyhow::bail;
use std::path::{Path, PathBuf};

/// How a server is given CPU in a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// A CPU of its own: the client sets the pace (when it saturates
    /// first, the requests/s measure the client).
    Open,
    /// Every server in the same CPU quota (half a CPU), so
    /// the client has headroom and requests/s measure the server.
    Bound,
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scenario::Open => "open",
            Scenario::Bound => "bound",
        })
    }
}

/// The server-bound scenario's quota: half of one CPU.
pub const BOUND_SHARE: f64 = 0.5;

/// The scheduler's period, the quota a share of it: the kernel's default,
/// 100 ms, as a quota set by hand gets. The figures depend on it: a
/// server held back for 50 ms at a time finds more requests waiting when
/// it resumes and serves them in bigger batches (docs/experiments/resp.md
/// has E7's ratios with both periods).
const PERIOD_US: u64 = 100_000;

/// Where this machine's CPU controller is mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A cgroup whose processes together get at most `share` of one CPU.
pub struct CpuQuota {
    dir: PathBuf,
    /// Where processes go back to before the cgroup is removed.
    parent_procs: PathBuf,
}

/// The CPU controller's root on this machine, or why there is none.
fn controller() -> Result<(PathBuf, Version), String> {
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.cfs_quota_us").exists() {
        return Ok((v1.to_path_buf(), Version::V1));
    }
    let v2 = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.subtree_control")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "cpu") {
        return Ok((v2.to_path_buf(), Version::V2));
    }
    Err("no cgroup CPU controller (neither v1's /sys/fs/cgroup/cpu nor v2's cpu in cgroup.subtree_control)".into())
}

/// The scenarios that can run here: without a quota, the server-bound
/// one is refused when `asked` for by a flag, else left out with the
/// reason added to `missing`.
pub fn runnable(
    mut scenarios: Vec<Scenario>,
    asked: bool,
    missing: &mut Vec<String>,
) -> crate::CliResult<Vec<Scenario>> {
    if scenarios.contains(&Scenario::Bound) {
        if let Err(why) = available() {
            if asked {
                bail!("--scenarios bound: {why}");
            }
            missing.push(format!("the server-bound scenario is not run: {why}"));
            scenarios.retain(|s| *s != Scenario::Bound);
        }
    }
    Ok(scenarios)
}

/// Whether a quota can be made here, or why not (checked before any run).
pub fn available() -> Result<(), String> {
    controller()?;
    if !rustix::process::geteuid().is_root() {
        return Err("a CPU quota needs root (it makes a cgroup)".into());
    }
    Ok(())
}

/// Removes the quota cgroups this process made and still has (its
/// processes killed first): a signal ends the run without their `Drop`.
/// Returns their names.
pub fn remove_live() -> Vec<String> {
    let Ok((root, _)) = controller() else { return Vec::new() };
    let ours = format!("iomux-lab-{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir(&root) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&ours))
        .filter(|e| std::fs::remove_dir(e.path()).is_ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

impl CpuQuota {
    /// A new cgroup limited to `share` of one CPU (0 < share <= number of CPUs).
    pub fn new(share: f64) -> Result<CpuQuota, String> {
        let (root, version) = controller()?;
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = root.join(format!("iomux-lab-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir(&dir).map_err(|e| format!("creating the cgroup {}: {e}", dir.display()))?;
        let quota = CpuQuota { dir, parent_procs: root.join("cgroup.procs") };
        let quota_us = (share * PERIOD_US as f64).round() as u64;
        match version {
            Version::V1 => {
                quota.write("cpu.cfs_period_us", &PERIOD_US.to_string())?;
                quota.write("cpu.cfs_quota_us", &quota_us.to_string())?;
            }
            Version::V2 => quota.write("cpu.max", &format!("{quota_us} {PERIOD_US}"))?,
        }
        Ok(quota)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir.join(file);
        std::fs::write(&path, value).map_err(|e| format!("writing {value} to {}: {e}", path.display()))
    }

    /// Moves process `pid` (all its threads, an SQPOLL thread included)
    /// into the quota; what it forks later is in it too.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Periods in which the cgroup used its whole quota and was held back
    /// (`nr_throttled` of cpu.stat): more than zero shows the quota bound.
    pub fn throttled_periods(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).ok()?;
        stat.lines().find_map(|l| l.strip_prefix("nr_throttled ")?.trim().parse().ok())
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // Processes still inside go back to the root, or the cgroup
        // could not be removed.
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace() {
            let _ = std::fs::write(&self.parent_procs, pid);
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("lab: could not remove the cgroup {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that make quotas take turns: `remove_live` removes every
    /// empty quota of this process, another test's just made one too.
    static QUOTAS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A new quota of `share`, and this test's turn, held while both live;
    /// None (the test says it is skipped) without root or a CPU controller.
    fn test_quota(share: f64) -> Option<(std::sync::MutexGuard<'static, ()>, CpuQuota)> {
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return None;
        }
        let turn = QUOTAS.lock().unwrap_or_else(|e| e.into_inner());
        Some((turn, CpuQuota::new(share).expect("a cgroup with a quota")))
    }

    /// A quota left without its `Drop` (a signal ended the run) is found
    /// and removed. Skipped (and says so) without root or a CPU controller.
    #[test]
    fn a_quota_left_behind_is_removed() {
        let Some((_turn, quota)) = test_quota(0.5) else { return };
        let (dir, name) = (quota.dir.clone(), quota.dir.file_name().map(|n| n.to_string_lossy().into_owned()));
        std::mem::forget(quota);
        let removed = remove_live();
        assert!(name.is_some_and(|n| removed.contains(&n)), "{removed:?} lacks {}", dir.display());
        assert!(!dir.exists(), "{} is still there", dir.display());
    }

    /// A quota holds a busy process to its share: the cgroup's processes
    /// are throttled, and the process's CPU over a wall interval is near
    /// the share. Skipped (and says so) without root or a CPU controller.
    #[test]
    fn a_quota_throttles_a_busy_process() {
        let Some((_turn, quota)) = test_quota(0.2) else { return };
        let mut busy = std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().expect("sh");
        quota.add(busy.id()).expect("moved into the quota");
        let before = crate::os::process_cpu(busy.id()).expect("its CPU time");
        std::thread::sleep(std::time::Duration::from_millis(600));
        let used = crate::os::process_cpu(busy.id()).expect("its CPU time") - before;
        let throttled = quota.throttled_periods();
        let _ = busy.kill();
        let _ = busy.wait();
        let share = used.as_secs_f64() / 0.6;
        assert!(share < 0.3, "a 20% quota let it use {:.0}% of a CPU", share * 100.0);
        assert!(throttled.is_some_and(|n| n > 0), "throttled periods: {throttled:?}");
    }
}
