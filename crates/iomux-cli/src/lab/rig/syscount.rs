//! Syscalls of a running process counted from outside: `perf stat -I`
//! (a count every few milliseconds) attached to its pid, the counts laid
//! on the Unix clock, so that a window known only afterwards (the load's)
//! can be cut out of them.

use crate::lab::rig::sampler::{unix_now, Timeline};
use crate::CliResult;
use anyhow::{bail, Context as _};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

/// perf's interval: the window's edges fall within one of them.
const INTERVAL_MS: u32 = 10;

/// How long perf may take to attach and print its first interval.
const ATTACH_WITHIN: Duration = Duration::from_secs(10);

/// One interval line: when it arrived here (Unix s), the end of its
/// interval on perf's clock (s since perf started counting), its count.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Interval {
    arrived: f64,
    at: f64,
    count: u64,
}

/// A line perf printed: an interval's count, or anything else (a
/// message, kept to say why perf failed).
type Line = Result<Interval, String>;

/// `perf stat -I` running against one process.
pub struct SyscallCounter {
    child: Child,
    lines: Receiver<Line>,
    reader: Option<JoinHandle<()>>,
    first: Vec<Interval>,
}

impl SyscallCounter {
    /// Attaches to `pid` for at most `bound` (perf runs under `timeout`, so
    /// it ends even if this process does not stop it); returns once perf
    /// is counting.
    pub fn attach(pid: u32, bound: Duration) -> CliResult<SyscallCounter> {
        let mut child = Command::new("timeout")
            .args(["--signal=INT", "--kill-after=5", &format!("{:.0}", bound.as_secs_f64().ceil())])
            .args(["perf", "stat", "-I", &INTERVAL_MS.to_string(), "-x", ",", "-e", "raw_syscalls:sys_enter"])
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start perf stat")?;
        let stderr = child.stderr.take().context("no stderr from perf stat")?;
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // Stamped on arrival: perf prints each interval as it ends.
                let arrived = unix_now();
                let sent = match parse_interval(&line) {
                    Some((at, count)) => tx.send(Ok(Interval { arrived, at, count })),
                    None if line.trim().is_empty() => continue,
                    None => tx.send(Err(line)),
                };
                if sent.is_err() {
                    break;
                }
            }
        });
        let mut counter = SyscallCounter { child, lines, reader: Some(reader), first: Vec::new() };
        let deadline = std::time::Instant::now() + ATTACH_WITHIN;
        let mut said = String::from("nothing");
        loop {
            match counter.lines.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
                Ok(Ok(first)) => {
                    counter.first.push(first);
                    return Ok(counter);
                }
                Ok(Err(line)) => said = line,
                Err(RecvTimeoutError::Timeout) => {
                    let within = ATTACH_WITHIN.as_secs();
                    bail!("perf stat -p {pid} printed no count within {within} s (it said: {said})");
                }
                // perf has exited (its stderr closed): its last words say why.
                Err(RecvTimeoutError::Disconnected) => {
                    let status = counter.child.wait().map_or_else(|e| e.to_string(), |s| s.to_string());
                    bail!("perf stat -p {pid} exited ({status}): {said}");
                }
            }
        }
    }

    /// Stops perf (SIGINT: it prints the interval under way) and returns
    /// the syscalls counted since it attached, on the Unix clock.
    pub fn finish(mut self) -> CliResult<Timeline> {
        self.interrupt();
        let status = self.child.wait().context("waiting for perf stat")?;
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let mut all = std::mem::take(&mut self.first);
        all.extend(self.lines.try_iter().filter_map(Result::ok));
        if all.is_empty() {
            bail!("perf stat counted nothing ({status})");
        }
        Ok(timeline(&all))
    }

    fn interrupt(&self) {
        let pid = i32::try_from(self.child.id()).ok().and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            // timeout passes SIGINT on to perf; one already gone needs none.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
    }
}

impl Drop for SyscallCounter {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.interrupt();
            let _ = self.child.wait();
        }
    }
}

/// `TIME,COUNT,UNIT,EVENT,...` (perf stat -I -x ,); a count perf could not
/// take (`<not counted>`) is none.
fn parse_interval(line: &str) -> Option<(f64, u64)> {
    let mut fields = line.split(',');
    let at = fields.next()?.trim().parse::<f64>().ok()?;
    let count = fields.next()?.trim();
    let event = fields.nth(1)?;
    if !event.contains("raw_syscalls:sys_enter") {
        return None;
    }
    Some((at, count.parse().unwrap_or(0)))
}

/// The cumulative count on the Unix clock. perf's interval times count
/// from when it started counting; the offset to Unix time is the smallest
/// (arrival - time) over the lines, since each line arrives no earlier
/// than its interval ends and at least one arrives at once.
fn timeline(intervals: &[Interval]) -> Timeline {
    let offset = intervals.iter().map(|i| i.arrived - i.at).fold(f64::INFINITY, f64::min);
    let mut t = Timeline::default();
    t.push(offset, 0.0);
    let mut total = 0u64;
    for i in intervals {
        total += i.count;
        t.push(offset + i.at, total as f64);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_lines_parse() {
        assert_eq!(
            parse_interval("     0.010094893,1234,,raw_syscalls:sys_enter,10042543,100.00,,"),
            Some((0.010094893, 1234))
        );
        assert_eq!(parse_interval("1.5,<not counted>,,raw_syscalls:sys_enter,0,100.00,,"), Some((1.5, 0)));
        assert_eq!(parse_interval("# started on Mon"), None);
        assert_eq!(parse_interval("print interval < 100ms. The overhead percentage could be high"), None);
    }

    #[test]
    fn counts_land_on_the_unix_clock() {
        let lines = [
            Interval { arrived: 100.0102, at: 0.01, count: 10 },
            Interval { arrived: 100.0201, at: 0.02, count: 20 },
            Interval { arrived: 100.0305, at: 0.03, count: 30 },
        ];
        let t = timeline(&lines);
        // The second line came soonest after its interval: offset 100.0001.
        assert!((t.at(100.0001).unwrap() - 0.0).abs() < 1e-9);
        assert!((t.at(100.0201).unwrap() - 30.0).abs() < 1e-6);
        assert!((t.over((100.0101, 100.0301)).unwrap() - 50.0).abs() < 1e-6);
    }
}
