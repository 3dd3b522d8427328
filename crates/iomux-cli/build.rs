//! Records the commit the binary is built from as `IOMUX_COMMIT`, for the
//! lab's results: a run that goes on in parts (`bench --resume`) says
//! which code measured which part. "unknown" outside a git checkout.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=IOMUX_COMMIT={commit}");
    // A commit or a checkout moves HEAD's log; then the hash is read again
    // (and not on every edit of the crate's files).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        println!("cargo:rerun-if-changed={}", dir.join("logs").join("HEAD").display());
    }
}
