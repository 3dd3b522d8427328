//! Process matters the library leaves to its users: the open-files limit,
//! CPU pinning, resource usage. Through rustix where it has the
//! call, otherwise libc. None of these calls is counted: the library's
//! counters are for what the library itself issues.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

/// RLIMIT_NOFILE as (soft, hard); unlimited is `u64::MAX`.
pub fn nofile_limit() -> (u64, u64) {
    let lim = getrlimit(Resource::Nofile);
    (lim.current.unwrap_or(u64::MAX), lim.maximum.unwrap_or(u64::MAX))
}

fn set_nofile(soft: u64, hard: u64) -> io::Result<()> {
    let limited = |v: u64| (v != u64::MAX).then_some(v);
    Ok(setrlimit(Resource::Nofile, Rlimit { current: limited(soft), maximum: limited(hard) })?)
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let (soft, hard) = nofile_limit();
    if soft >= hard {
        return Ok(soft);
    }
    set_nofile(hard, hard)?;
    Ok(hard)
}

/// Sets the soft RLIMIT_NOFILE (at most the hard limit).
pub fn set_nofile_soft(limit: u64) -> io::Result<()> {
    let (_, hard) = nofile_limit();
    set_nofile(limit.min(hard), hard)
}

/// The descriptor numbers this process has open now (from /proc/self/fd).
pub fn open_fd_count() -> io::Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count().saturating_sub(1))
}

/// Pins the calling thread to one CPU (sched_setaffinity).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no CPU {cpu} in a cpu_set_t")));
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    Ok(rustix::thread::sched_setaffinity(None, &set)?)
}

/// Sends SIGTERM to process `pid`.
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no process can have pid {pid}")))?;
    Ok(rustix::process::kill_process(pid, rustix::process::Signal::TERM)?)
}

/// CPU time and peak memory of this process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    /// ru_maxrss, in bytes.
    pub peak_rss: u64,
}

/// getrusage(RUSAGE_SELF) (rustix has no getrusage).
pub fn usage() -> io::Result<Usage> {
    let mut ru = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru points at a live rusage the kernel fills in.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed is a valid rusage (plain old data), and getrusage
    // succeeded, so it is filled in.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok(Usage { user: tv(ru.ru_utime), system: tv(ru.ru_stime), peak_rss: ru.ru_maxrss as u64 * 1024 })
}

/// The process image's peak resident memory, in bytes (VmHWM from
/// /proc/self/status). Unlike ru_maxrss it excludes the parent's pages a
/// child inherited between fork and exec.
pub fn peak_rss() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no VmHWM in /proc/self/status"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_usage_read_back() {
        let (soft, hard) = nofile_limit();
        assert!(soft <= hard);
        assert_eq!(raise_nofile_limit().unwrap(), hard);
        assert_eq!(nofile_limit().0, hard);
        assert!(open_fd_count().unwrap() >= 3);
        let u = usage().unwrap();
        assert!(u.peak_rss > 0);
        assert!(peak_rss().unwrap() > 0);
        pin_to_cpu(0).unwrap();
        assert!(pin_to_cpu(usize::MAX).is_err());
    }
}
