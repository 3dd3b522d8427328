//! `iomux load` as a child of the lab, started one way for every
//! experiment: its flags from a [`LoadArgs`], its result written to a
//! private folder, its stderr kept for the message of a load that fails.

use crate::load::result::LoadResult;
use crate::load::LoadArgs;
use crate::os::PrivateDir;
use crate::CliResult;
use anyhow::Context as _;
use std::ffi::OsStr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// Where the load's stderr goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// To a file, for the message of a load that fails.
    Kept,
    /// To the bench's own stderr: a long run's progress, shown as it goes.
    Shown,
}

pub struct LoadChild {
    child: Child,
    stderr: Stderr,
    /// Holds `load.json` and `load.stderr`; removed when dropped.
    dir: PrivateDir,
    /// Where it runs, for messages: "" or " in the client's namespace".
    place: String,
}

impl LoadChild {
    /// Starts `iomux load` with `args`' flags (their `--json` replaced by
    /// its own file). `command` makes the command that runs the given
    /// executable: `Command::new`, or one that enters a namespace.
    pub fn start(
        args: &LoadArgs,
        command: impl FnOnce(&OsStr) -> Command,
        place: &str,
        shown: Stderr,
    ) -> CliResult<LoadChild> {
        let exe = std::env::current_exe().context("cannot find the iomux executable")?;
        let dir = PrivateDir::new("iomux-lab-load", "the load's result")?;
        let said = dir.path().join("load.stderr");
        let stderr = match shown {
            Stderr::Shown => Stdio::inherit(),
            Stderr::Kept => {
                std::fs::File::create(&said).with_context(|| format!("creating {}", said.display()))?.into()
            }
        };
        let mut args = args.clone();
        args.json = Some(dir.path().join("load.json"));
        let child = command(exe.as_os_str())
            .arg("load")
            .args(args.to_cli())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("cannot start iomux load{place}"))?;
        Ok(LoadChild { child, stderr: shown, dir, place: place.to_string() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` (`Duration::MAX`: for as long as it runs) for
    /// the load to exit. `exited` runs once it has exited and before it is
    /// reaped, while its CPU clock still reads (its final CPU time). None:
    /// it was still running at `limit`, and killed.
    pub fn wait(&mut self, limit: Duration, exited: impl FnOnce(u32)) -> CliResult<Option<ExitStatus>> {
        match crate::os::exited_within(&self.child, limit) {
            Ok(true) => {
                exited(self.pid());
                Ok(Some(self.child.wait().with_context(|| format!("reaping iomux load{}", self.place))?))
            }
            Ok(false) => {
                self.kill();
                Ok(None)
            }
            Err(e) => {
                self.kill();
                Err(e).with_context(|| format!("waiting for iomux load{}", self.place))
            }
        }
    }

    /// What a load [`LoadChild::wait`]ed for came to: its exit status and
    /// result; or why there is none (killed at `limit`, or no result, with
    /// its exit status). A failed exit with a result is the caller's to judge.
    pub fn outcome(&self, exited: Option<ExitStatus>, limit: Duration) -> Result<(ExitStatus, LoadResult), String> {
        let status = exited
            .ok_or_else(|| format!("iomux load{} did not finish within {} s; killed", self.place, limit.as_secs()))?;
        let result = self.result().map_err(|why| format!("iomux load{} exited with {status}: {why}", self.place))?;
        Ok((status, result))
    }

    /// The result it wrote, or why there is none (its last line on stderr).
    pub fn result(&self) -> Result<LoadResult, String> {
        let json = self.dir.path().join("load.json");
        let text = std::fs::read_to_string(&json);
        match text.as_deref().map(serde_json::from_str::<LoadResult>) {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(format!("iomux load{} wrote no readable result ({e})", self.place)),
            Err(_) => Err(format!("iomux load{} wrote no result: {}", self.place, self.last_words())),
        }
    }

    /// Its last line on stderr.
    pub fn last_words(&self) -> String {
        if self.stderr == Stderr::Shown {
            return "its messages are above".into();
        }
        let said = std::fs::read_to_string(self.dir.path().join("load.stderr")).unwrap_or_default();
        said.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing on stderr").trim().to_string()
    }

    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A load dropped is killed: its clients gone at once.
impl Drop for LoadChild {
    fn drop(&mut self) {
        self.kill();
    }
}
