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

/// How many CPUs this process may run on, as read the first time it is
/// asked (at least 1). Not the calling thread's affinity of the moment
/// (`available_parallelism`): a thread pinned to one CPU, for a cell or
/// a load, would make a machine of two look like a machine of one.
pub fn cpus() -> usize {
    static AT_FIRST_ASK: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *AT_FIRST_ASK.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
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

/// The calling thread pinned to one CPU while this lives, its former CPUs
/// given back when dropped. (In E5's cells: the thread that waits for the
/// load, and the perf and `timeout` it starts, since a child inherits the
/// mask, then wake on the load's CPU and leave the server's to the server.)
pub struct PinnedHere(Option<rustix::thread::CpuSet>);

impl PinnedHere {
    pub fn to(cpu: Option<usize>) -> PinnedHere {
        let Some(cpu) = cpu else { return PinnedHere(None) };
        let Ok(before) = rustix::thread::sched_getaffinity(None) else { return PinnedHere(None) };
        // Unpinned, the cell still runs: these threads only share a CPU less fairly.
        match pin_to_cpu(cpu) {
            Ok(()) => PinnedHere(Some(before)),
            Err(_) => PinnedHere(None),
        }
    }
}

impl Drop for PinnedHere {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = rustix::thread::sched_setaffinity(None, before);
        }
    }
}

/// Sends SIGTERM to process `pid`.
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no process can have pid {pid}")))?;
    Ok(rustix::process::kill_process(pid, rustix::process::Signal::TERM)?)
}

/// Sends `signal` to `child` and waits up to `grace` for it to exit;
/// false when it has not (the caller's Drop kills it).
pub fn signal_and_wait(child: &mut std::process::Child, signal: rustix::process::Signal, grace: Duration) -> bool {
    if let Some(pid) = i32::try_from(child.id()).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, signal);
    }
    matches!(wait_within(child, grace), Ok(Some(_)))
}

/// Waits up to `limit` (`Duration::MAX`: without one) for `child`, not
/// reaped yet, to exit, without reaping it: true once it has, false at the
/// limit. By its pidfd: no sleep loop that sees an exit late, and not
/// wait-timeout, which would install a process-wide SIGCHLD handler for
/// it. Where pidfd_open fails (no descriptor left, a seccomp filter), by
/// waitid's peek every 10 ms instead.
pub fn exited_within(child: &std::process::Child, limit: Duration) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("no process has pid {}", child.id())))?;
    let deadline = std::time::Instant::now().checked_add(limit);
    let pidfd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        // This process reaped it already.
        Err(rustix::io::Errno::SRCH) => return Ok(true),
        Err(_) => return peek_until(pid, deadline),
    };
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let timeout = left.map(|w| Timespec { tv_sec: w.as_secs() as i64, tv_nsec: i64::from(w.subsec_nanos()) });
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) if left.is_some_and(|l| l.is_zero()) => return Ok(false),
            Ok(0) | Err(rustix::io::Errno::INTR) => {}
            Ok(_) => return Ok(true),
            Err(e) => return Err(io::Error::new(e.kind(), format!("poll on the pidfd of pid {}: {e}", child.id()))),
        }
    }
}

/// [`exited_within`] without a pidfd: waitid's peek, which reaps nothing.
fn peek_until(pid: rustix::process::Pid, deadline: Option<std::time::Instant>) -> io::Result<bool> {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    loop {
        let peek = waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT);
        match peek {
            Ok(Some(_)) | Err(rustix::io::Errno::CHILD) => return Ok(true),
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("waitid on pid {}: {e}", pid.as_raw_nonzero()))),
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`exited_within`], then reaped: its status, or None at the limit. A
/// child reaped already gives the status std kept.
pub fn wait_within(child: &mut std::process::Child, limit: Duration) -> io::Result<Option<std::process::ExitStatus>> {
    if let Some(status) = child.try_wait()? {
        return Ok(Some(status));
    }
    if exited_within(child, limit)? {
        child.wait().map(Some)
    } else {
        Ok(None)
    }
}

/// CPU time (user + system, in ns as the scheduler counts it) that
/// process `pid` has used so far, all its threads, the exited ones too
/// (CLOCK_PROCESS_CPUTIME_ID of another process; readable until it is
/// reaped, so also for one that has just exited).
pub fn process_cpu(pid: u32) -> io::Result<Duration> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("no process can have pid {pid}")))?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock is a live clockid_t the call writes.
    let err = unsafe { libc::clock_getcpuclockid(pid, &mut clock) };
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a live timespec the call writes.
    if unsafe { libc::clock_gettime(clock, &mut ts) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Tests: uses `d` of this thread's CPU time (not of wall time: on a busy
/// machine a spin by the wall clock gets less CPU than it waited).
#[cfg(test)]
pub fn spin_cpu(d: Duration) {
    let thread_cpu = || {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: ts is a live timespec the call writes.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    };
    let start = thread_cpu();
    while thread_cpu() - start < d {
        std::hint::black_box(0);
    }
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
    usage_of(libc::RUSAGE_SELF)
}

/// User + system CPU of every child this process has waited for.
pub fn children_cpu() -> io::Result<Duration> {
    usage_of(libc::RUSAGE_CHILDREN).map(|u| u.user + u.system)
}

fn usage_of(who: libc::c_int) -> io::Result<Usage> {
    let mut ru = MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: ru points at a live rusage the kernel fills in.
    if unsafe { libc::getrusage(who, ru.as_mut_ptr()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed is a valid rusage (plain old data), and getrusage
    // succeeded, so it is filled in.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Ok(Usage { user: tv(ru.ru_utime), system: tv(ru.ru_stime), peak_rss: ru.ru_maxrss as u64 * 1024 })
}

/// Waits for `child` (spawned with piped stdout and stderr) and collects
/// its output; kills and reaps it if it runs longer than `limit`.
pub fn wait_output_within(mut child: std::process::Child, limit: Duration) -> io::Result<std::process::Output> {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let waited = wait_within(&mut child, limit);
    let Ok(Some(status)) = waited else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(waited.err().unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::TimedOut, format!("still running after {limit:?}; killed"))
        }));
    };
    let joined = |h: std::thread::JoinHandle<Vec<u8>>| h.join().unwrap_or_default();
    Ok(std::process::Output { status, stdout: joined(stdout), stderr: joined(stderr) })
}

/// /proc/meminfo, every figure in bytes: its one reader here (the lab's
/// memory sampler, `iomux limits` and the machine's description). None
/// where it cannot be read.
pub fn meminfo() -> Option<procfs::Meminfo> {
    use procfs::Current;
    procfs::Meminfo::current().ok()
}

/// The value of a `Field:   N kB` line of /proc/PID/status, in KiB.
pub fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The process image's peak resident memory, in bytes (VmHWM from
/// /proc/self/status). Unlike ru_maxrss it excludes the parent's pages a
/// child inherited between fork and exec.
pub fn peak_rss() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    kib_field(&status, "VmHWM:")
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no VmHWM in /proc/self/status"))
}

/// A folder only this user can enter (mode 0700, a name nobody else
/// holds), in the temporary folder, for a run's working files (results of
/// child processes); removed with what it holds when dropped.
pub struct PrivateDir(tempfile::TempDir);

impl PrivateDir {
    /// `what` names the contents, for the error.
    pub fn new(prefix: &str, what: &str) -> io::Result<PrivateDir> {
        use std::os::unix::fs::PermissionsExt;
        let only_us = std::fs::Permissions::from_mode(0o700);
        let made = tempfile::Builder::new().prefix(&format!("{prefix}-")).permissions(only_us).tempdir();
        made.map(PrivateDir).map_err(|e| {
            io::Error::new(e.kind(), format!("creating a folder for {what} in {}: {e}", std::env::temp_dir().display()))
        })
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

/// TcpExt ListenOverflows from /proc/net/netstat: SYNs this network
/// namespace dropped because a listen queue was full.
pub fn listen_overflows() -> Option<u64> {
    counter(&std::fs::read_to_string("/proc/net/netstat").ok()?, "TcpExt:", "ListenOverflows")
}

/// Tcp RetransSegs from /proc/net/snmp: segments this network namespace
/// retransmitted.
pub fn retransmitted_segments() -> Option<u64> {
    counter(&std::fs::read_to_string("/proc/net/snmp").ok()?, "Tcp:", "RetransSegs")
}

/// A counter of /proc/net/snmp or /proc/net/netstat text: the first line
/// starting with `prefix` names the columns of the next one.
pub fn counter(text: &str, prefix: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let (names, values) = (lines.next()?, lines.next()?);
    let at = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(at)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_waited_for_up_to_a_limit() {
        let mut child = std::process::Command::new("sleep").arg("0.3").spawn().unwrap();
        assert!(!exited_within(&child, Duration::from_millis(50)).unwrap(), "still sleeping");
        let status = wait_within(&mut child, Duration::from_secs(5)).unwrap();
        assert!(status.is_some_and(|s| s.success()));
        let mut quick = std::process::Command::new("true").spawn().unwrap();
        assert!(wait_within(&mut quick, Duration::MAX).unwrap().is_some(), "no limit at all");
        assert!(wait_within(&mut quick, Duration::ZERO).unwrap().is_some(), "reaped already: the status kept");
        let gone = std::process::Command::new("true").spawn().unwrap();
        let pid = rustix::process::Pid::from_raw(gone.id() as i32).unwrap();
        assert!(peek_until(pid, None).unwrap(), "the peek sees the exit");
        let mut gone = gone;
        assert!(gone.wait().unwrap().success(), "and reaped nothing");
    }

    #[test]
    fn a_private_folder_is_ours_alone_and_goes_when_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let dir = PrivateDir::new("iomux-test", "a test").unwrap();
        let path = dir.path().to_path_buf();
        std::fs::write(path.join("f"), "x").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700);
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn counters_are_read_by_column_name() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs\n\
                    Tcp: 1 200 120000 -1 10 20 0 1 3 1000 900 17 0\n\
                    Udp: InDatagrams\nUdp: 5\n";
        assert_eq!(counter(snmp, "Tcp:", "RetransSegs"), Some(17));
        assert_eq!(counter(snmp, "Udp:", "InDatagrams"), Some(5));
        assert_eq!(counter(snmp, "Tcp:", "NoSuchColumn"), None);
        assert_eq!(counter("Ip: a\nIp: 1\n", "Tcp:", "RetransSegs"), None);
    }

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
        let before = rustix::thread::sched_getaffinity(None).unwrap();
        {
            let _pinned = PinnedHere::to(Some(0));
            assert_eq!(rustix::thread::sched_getaffinity(None).unwrap().count(), 1, "pinned to CPU 0");
            assert!(pin_to_cpu(usize::MAX).is_err());
        }
        assert!(rustix::thread::sched_getaffinity(None).unwrap() == before, "the CPUs given back");
    }
}
