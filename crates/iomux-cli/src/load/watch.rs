//! Live counters while a load runs: what the loops update, the one
//! progress line people read ("812,000/1,000,000 connected, 0 echoes,
//! errors: EADDRNOTAVAIL x3"), and the compact line a child process sends
//! its parent (`--procs`) so the parent can show that line for all.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Updated by the loops, read by a watcher thread.
#[derive(Default, Debug)]
pub struct Counters {
    pub echoes: AtomicU64,
    pub connected: AtomicU64,
    /// Errors by kind: an errno name for failed connects, else what went wrong.
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Counters {
    /// Counts one error of `kind` (rare: a lock per error is cheap enough).
    pub fn error(&self, kind: &str) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        // The wire format separates kinds with ',' and counts with '='.
        let kind = kind.replace([',', '='], " ");
        *errors.entry(kind).or_default() += 1;
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            connected: self.connected.load(Ordering::Relaxed),
            echoes: self.echoes.load(Ordering::Relaxed),
            errors: self.errors.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

/// The counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub connected: u64,
    pub echoes: u64,
    pub errors: BTreeMap<String, u64>,
}

/// Starts a child's progress line on its stdout.
const WIRE: &str = "@progress ";

impl Snapshot {
    /// The progress line for `target` connections.
    pub fn line(&self, target: u64) -> String {
        let errors: Vec<String> = self.errors.iter().map(|(k, n)| format!("{k} x{}", thousands(*n))).collect();
        format!(
            "{}/{} connected, {} echoes, errors: {}",
            thousands(self.connected),
            thousands(target),
            thousands(self.echoes),
            if errors.is_empty() { "none".to_string() } else { errors.join(", ") }
        )
    }

    /// `@progress CONNECTED ECHOES KIND=N,KIND=N` (one line, no newline).
    pub fn to_wire(&self) -> String {
        let errors: Vec<String> = self.errors.iter().map(|(k, n)| format!("{k}={n}")).collect();
        format!("{WIRE}{} {} {}", self.connected, self.echoes, errors.join(","))
    }

    /// Reads a line [`Snapshot::to_wire`] wrote; `None` for any other line.
    pub fn from_wire(line: &str) -> Option<Snapshot> {
        let mut fields = line.strip_prefix(WIRE)?.splitn(3, ' ');
        let connected = fields.next()?.parse().ok()?;
        let echoes = fields.next()?.parse().ok()?;
        let mut errors = BTreeMap::new();
        for pair in fields.next().unwrap_or("").split(',').filter(|p| !p.is_empty()) {
            let (k, n) = pair.rsplit_once('=')?;
            errors.insert(k.to_string(), n.parse().ok()?);
        }
        Some(Snapshot { connected, echoes, errors })
    }

    pub fn add(&mut self, o: &Snapshot) {
        self.connected += o.connected;
        self.echoes += o.echoes;
        for (k, n) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += n;
        }
    }
}

/// The one progress line of a run, on a bar that fills with time (or,
/// with a fixed number of messages, with echoes).
pub struct Display {
    bar: crate::progress::Progress,
    target: u64,
    by_time: bool,
    started: Instant,
}

impl Display {
    /// `target`: the connections to open; `seconds` or `messages`: the run's length.
    pub fn new(target: u64, seconds: Option<f64>, messages: u64) -> Display {
        let bar = crate::progress::Progress::new("load", seconds.map_or(messages, |s| s.ceil() as u64));
        Display { bar, target, by_time: seconds.is_some(), started: Instant::now() }
    }

    pub fn show(&self, s: &Snapshot) {
        self.bar.set_position(if self.by_time { self.started.elapsed().as_secs() } else { s.echoes });
        self.bar.set_message(&s.line(self.target));
    }

    pub fn println(&self, line: &str) {
        self.bar.println(line);
    }

    pub fn finish(&self) {
        self.bar.finish();
    }
}

/// 1234567 as "1,234,567".
pub fn thousands(n: u64) -> String {
    // Exact: progress counts stay far below 2^53.
    crate::numbers::thousands(n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_reads_well() {
        let c = Counters::default();
        c.connected.store(812_000, Ordering::Relaxed);
        for _ in 0..3 {
            c.error("EADDRNOTAVAIL");
        }
        assert_eq!(c.snapshot().line(1_000_000), "812,000/1,000,000 connected, 0 echoes, errors: EADDRNOTAVAIL x3");
        assert_eq!(Snapshot::default().line(5), "0/5 connected, 0 echoes, errors: none");
    }

    #[test]
    fn wire_lines_round_trip_and_add() {
        let c = Counters::default();
        c.echoes.store(42, Ordering::Relaxed);
        c.error("ECONNREFUSED");
        c.error("closed, early=1");
        let s = c.snapshot();
        let back = Snapshot::from_wire(&s.to_wire()).unwrap();
        assert_eq!(back, s);
        assert_eq!(Snapshot::from_wire(&Snapshot::default().to_wire()), Some(Snapshot::default()));
        assert_eq!(Snapshot::from_wire("iomux load: 3 connections"), None);
        let mut sum = back.clone();
        sum.add(&back);
        assert_eq!(sum.echoes, 84);
        assert_eq!(sum.errors["ECONNREFUSED"], 2);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(12_345_678), "12,345,678");
    }
}
