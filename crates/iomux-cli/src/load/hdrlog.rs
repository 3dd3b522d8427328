//! Latency over time (`--hdr-log`): each loop keeps one histogram for the
//! current second and encodes it (V2 + deflate, a few KiB) when the second
//! ends, so memory stays small however long the run; at the end the
//! intervals of every loop (or every child's log, with --procs) are added
//! second by second into one standard HdrHistogram interval log (V2),
//! which HdrLogProcessing and HistogramLogAnalyzer read.
//!
//! Intervals are whole Unix seconds: loops and processes on one host share
//! the clock, so the same second is the same interval everywhere without
//! any coordination.

use super::hist;
use crate::CliResult;
use anyhow::{anyhow, Context as _};
use base64::Engine;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, IntervalLogWriterBuilder, LogEntry};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// One second of latencies.
#[derive(Clone, Debug)]
pub struct Interval {
    /// Unix time of its start, whole seconds.
    pub second: u64,
    /// Its histogram, V2 + deflate.
    pub encoded: Vec<u8>,
}

/// Maps `Instant`s onto Unix time, read once per process so that every
/// loop agrees on where each second starts.
#[derive(Clone, Copy, Debug)]
pub struct UnixClock {
    instant: Instant,
    unix: Duration,
}

impl UnixClock {
    pub fn now() -> UnixClock {
        let unix = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        UnixClock { instant: Instant::now(), unix }
    }

    pub fn unix(&self, t: Instant) -> Duration {
        match t.checked_duration_since(self.instant) {
            Some(after) => self.unix + after,
            None => self.unix.saturating_sub(self.instant - t),
        }
    }
}

/// Records one loop's latencies second by second.
pub struct IntervalRecorder {
    clock: UnixClock,
    second: u64,
    current: Histogram<u64>,
    serializer: V2DeflateSerializer,
    pub done: Vec<Interval>,
    /// The first failure to encode (reported when the log is written).
    pub error: Option<String>,
}

impl IntervalRecorder {
    pub fn new(clock: UnixClock) -> IntervalRecorder {
        IntervalRecorder {
            clock,
            second: 0,
            current: hist::latency_histogram(),
            serializer: V2DeflateSerializer::new(),
            done: Vec::new(),
            error: None,
        }
    }

    /// Records `ns` for an echo completed at `at`.
    pub fn record(&mut self, at: Instant, ns: u64) {
        let second = self.clock.unix(at).as_secs();
        if second != self.second {
            self.flush();
            self.second = second;
        }
        self.current.saturating_record(ns);
    }

    /// Encodes the current second, if it holds anything (gaps are filled
    /// with empty intervals when the log is written).
    pub fn flush(&mut self) {
        if self.current.is_empty() {
            return;
        }
        match hist::encode(&self.current, &mut self.serializer) {
            Ok(encoded) => self.done.push(Interval { second: self.second, encoded }),
            Err(e) => {
                self.error.get_or_insert_with(|| crate::one_line(e));
            }
        }
        self.current.reset();
    }
}

/// What a log holds: when measuring started (Unix time) and the intervals.
#[derive(Debug, Default)]
pub struct Log {
    pub start: Option<Duration>,
    pub intervals: Vec<Interval>,
}

impl Log {
    pub fn absorb(&mut self, o: Log) {
        self.start = match (self.start, o.start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.intervals.extend(o.intervals);
    }

    /// Writes the log: the Java writer's headers and legend, then one line
    /// per second from the first interval to the last (intervals from
    /// several loops or processes for the same second are added; seconds
    /// nobody recorded in are written empty, so stalls show as gaps in the
    /// counts, not in the timeline).
    pub fn write(mut self, path: &Path) -> CliResult<()> {
        let what = || format!("writing the interval log {}", path.display());
        self.intervals.sort_by_key(|i| i.second);
        let first = self.intervals.first().map(|i| i.second);
        let start = self.start.or(first.map(Duration::from_secs)).unwrap_or_default();
        let base = start.as_secs().min(first.unwrap_or(u64::MAX));
        let unix = |d: Duration| SystemTime::UNIX_EPOCH + d;

        let file = std::fs::File::create(path).with_context(what)?;
        let mut out = std::io::BufWriter::new(file);
        let mut serializer = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment(&format!("[Logged with iomux {}]", env!("CARGO_PKG_VERSION")))
            .add_comment("[Histogram log format version 1.3]")
            .add_comment("[latency in nanoseconds; Interval_Max in milliseconds]")
            .with_start_time(unix(start))
            .with_base_time(unix(Duration::from_secs(base)))
            .begin_log_with(&mut out, &mut serializer)
            .with_context(what)?;
        // The builder writes no legend line; readers expect one before the intervals.
        writeln!(out, "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"")
            .with_context(what)?;
        let mut log = IntervalLogWriterBuilder::new()
            .with_max_value_divisor(1e6)
            .begin_log_with(&mut out, &mut serializer)
            .with_context(what)?;
        let mut sum = hist::latency_histogram();
        let mut intervals = self.intervals.iter().peekable();
        while let Some(second) = intervals.peek().map(|i| i.second) {
            while let Some(i) = intervals.next_if(|i| i.second == second) {
                hist::add(&mut sum, &hist::decode(&i.encoded)?)?;
            }
            log.write_histogram(&sum, Duration::from_secs(second - base), Duration::from_secs(1), None)
                .with_context(what)?;
            sum.reset();
            // Empty seconds up to the next interval.
            let next = intervals.peek().map_or(second + 1, |i| i.second);
            for empty in second + 1..next {
                log.write_histogram(&sum, Duration::from_secs(empty - base), Duration::from_secs(1), None)
                    .with_context(what)?;
            }
        }
        drop(log);
        out.flush().with_context(what)?;
        Ok(())
    }

    /// Reads a log [`Log::write`] wrote (or any V2 interval log whose
    /// intervals are whole seconds from a whole-second base).
    pub fn read(path: &Path) -> CliResult<Log> {
        let what = || format!("reading the interval log {}", path.display());
        let bytes = std::fs::read(path).with_context(what)?;
        let mut log = Log::default();
        let mut base = Duration::ZERO;
        for entry in IntervalLogIterator::new(&bytes) {
            match entry.map_err(|e| anyhow!("{}: {e:?}", what()))? {
                LogEntry::StartTime(t) => log.start = Some(t),
                LogEntry::BaseTime(t) => base = t,
                LogEntry::Interval(i) => {
                    let encoded =
                        base64::engine::general_purpose::STANDARD.decode(i.encoded_histogram()).with_context(what)?;
                    // Millisecond timestamps: round to the whole second.
                    let second = (base + i.start_timestamp()).as_secs_f64().round() as u64;
                    log.intervals.push(Interval { second, encoded });
                }
            }
        }
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_from_several_recorders_add_up_second_by_second() {
        let clock = UnixClock::now();
        let t0 = Instant::now();
        let (mut a, mut b) = (IntervalRecorder::new(clock), IntervalRecorder::new(clock));
        // a: seconds 0 and 3 (1 and 2 empty); b: second 0.
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        a.record(at(0.0), 1000);
        a.record(at(3.0), 2000);
        b.record(at(0.0), 5000);
        a.flush();
        b.flush();
        let mut log = Log { start: Some(clock.unix(t0)), intervals: a.done };
        log.absorb(Log { start: None, intervals: b.done });
        let path = std::env::temp_dir().join(format!("iomux-hdrlog-unit-{}.hlog", std::process::id()));
        log.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("#[StartTime: ") && text.contains("#[BaseTime: "), "{text}");
        assert!(text.contains("\"StartTimestamp\",\"Interval_Length\""), "{text}");
        let back = Log::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let counts: Vec<u64> = back.intervals.iter().map(|i| hist::decode(&i.encoded).unwrap().len()).collect();
        assert_eq!(counts, [2, 0, 0, 1], "both first seconds in one line, two empty ones, then a's last");
        let seconds: Vec<u64> = back.intervals.iter().map(|i| i.second).collect();
        assert!(seconds.windows(2).all(|w| w[1] == w[0] + 1), "{seconds:?}");
    }
}
