//! Where results go: `<name>.json`, `<name>.md` and `<name>.svg` in the
//! run's folder.

use crate::CliResult;
use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// `results/<UTC timestamp>` under the current directory.
pub fn default_dir() -> PathBuf {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    PathBuf::from("results").join(utc_timestamp(secs))
}

/// `YYYY-MM-DDTHH-MM-SSZ` (no colons, so it is a portable folder name).
pub fn utc_timestamp(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    // Civil-from-days (H. Hinnant), valid for any date after 1970.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The run's output folder, made ready before any experiment runs, so a
/// folder that cannot be written fails the run at once, not after it.
pub struct OutDir {
    pub path: PathBuf,
    /// The folders `prepare` made (the deepest first).
    made: Vec<PathBuf>,
}

impl OutDir {
    /// Creates `path` and its missing parents and checks it takes files
    /// (with a probe file, created and removed).
    pub fn prepare(path: PathBuf) -> CliResult<OutDir> {
        let made: Vec<PathBuf> =
            path.ancestors().take_while(|p| !p.as_os_str().is_empty() && !p.exists()).map(PathBuf::from).collect();
        let fail = |path: &Path| format!("cannot use {} as the output folder", path.display());
        std::fs::create_dir_all(&path).with_context(|| fail(&path))?;
        let out = OutDir { path, made };
        let probe = out.path.join(".iomux-probe");
        if let Err(e) = std::fs::File::create(&probe).and_then(|_| std::fs::remove_file(&probe)) {
            out.discard_if_empty();
            return Err(e).with_context(|| fail(&out.path));
        }
        Ok(out)
    }

    /// Removes the folders `prepare` made, as long as they are empty: a run
    /// that failed before writing anything leaves nothing behind.
    pub fn discard_if_empty(&self) {
        for dir in &self.made {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00-00-00Z");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00-00-00Z");
        assert_eq!(utc_timestamp(1_795_262_645), "2026-11-21T12-04-05Z");
    }
}
