//! What the tests of `iomux bench` experiments that drive other programs
//! share: the binary (never installing packages), tool and root checks,
//! and one bench run read back as JSON.

#![allow(dead_code)] // each test crate uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn iomux() -> Command {
    let mut iomux = Command::new(env!("CARGO_BIN_EXE_iomux"));
    // Tests never install packages: CI's script does, before them.
    iomux.env("IOMUX_NO_INSTALL", "1");
    iomux
}

pub fn installed(tool: &str) -> bool {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"].iter().any(|d| PathBuf::from(d).join(tool).exists())
}

/// Whether this process runs as root (/proc/self belongs to its user).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// Whether the lab can make a CPU quota here (cgroup v1 and root).
pub fn can_make_a_quota() -> bool {
    Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() && is_root()
}

/// Runs `iomux bench --smoke <args> --out <out>`, which must succeed, and
/// returns the experiment's JSON (`<name>.json`). `--smoke`: a test's
/// figures are not measurements, so its samples neither read nor wait for
/// the CPUs' placement.
pub fn bench(args: &[&str], out: &Path, name: &str) -> serde_json::Value {
    let run = iomux().args(["bench", "--smoke"]).args(args).arg("--out").arg(out).output().expect("run iomux");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let text = std::fs::read_to_string(out.join(format!("{name}.json"))).expect("the experiment's JSON");
    serde_json::from_str(&text).expect("JSON")
}

/// Each `(flags, says)`: `iomux bench <experiment> <flags>` fails before
/// anything runs (its output folder could not even be made), saying `says`.
pub fn refuses(experiment: &str, cases: &[(&[&str], &str)]) {
    for (args, says) in cases {
        let run =
            iomux().args(["bench", experiment]).args(*args).args(["--out", "/nonexistent/never"]).output().unwrap();
        assert!(!run.status.success(), "{args:?} accepted");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
