//! What a load run writes with `--json` (and `iomux merge` reads): every
//! count, the errors by kind, the latency summary and the whole latency
//! histogram (`latency_hdr`), so that results of processes, shards and
//! separate runs merge exactly.

use super::hdrlog::UnixClock;
use super::{hist, LoadArgs, LoadMode, Report};
use crate::CliResult;
use anyhow::{bail, Context as _};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The `kind` of a load result file.
pub const KIND: &str = "iomux load";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadResult {
    /// Always [`KIND`]: tells `iomux merge` what the file is.
    pub kind: String,
    pub connect: String,
    pub conns: u64,
    pub idle: u64,
    pub threads: u64,
    pub msg_size: u64,
    pub mode: String,
    pub rate: Option<f64>,
    /// Open loop: the schedule's grid (--tick-us).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_us: Option<u64>,
    pub backend: String,
    /// Global number of the first active connection (of this shard or process).
    pub first_conn: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardOf>,
    pub connected: u64,
    /// Measured seconds: from the first loop's start of measuring to the
    /// last loop's end (loops and processes start measuring once their own
    /// connections are up, so one loop's phase would understate the run).
    pub seconds: f64,
    /// Unix seconds of that start and that end.
    #[serde(default)]
    pub measure_window: Option<(f64, f64)>,
    /// Unix seconds when every message sent in the measure window had been
    /// answered (or given up on), before any connection closed: the end of
    /// the time the window's echoes took (the latest loop's, when merged).
    #[serde(default)]
    pub drained_at: Option<f64>,
    /// Seconds from the first connect to the last connection established or failed.
    pub setup_s: f64,
    /// Unix seconds of that first connect and that last connection.
    pub setup_window: Option<(f64, f64)>,
    /// Listen-queue overflows (TcpExtListenOverflows) on this machine, all
    /// listeners, while the load ran: SYNs dropped because a server did
    /// not accept fast enough (each retried after a second). Summed over
    /// hosts when shards merge.
    #[serde(default)]
    pub listen_overflows: Option<u64>,
    /// TCP segments retransmitted in this network namespace while the load
    /// ran (RetransSegs: every socket of the namespace, so on a shared
    /// host others' too): what loss cost. Summed when shards merge.
    #[serde(default)]
    pub retransmits: Option<u64>,
    pub echoes: u64,
    pub echo_bytes: u64,
    pub sent_messages: u64,
    pub sent_bytes: u64,
    pub echoes_per_sec: f64,
    pub mb_per_sec: f64,
    pub latency: Option<Latency>,
    /// The latency histogram (ns): HdrHistogram V2 + deflate, base64
    /// (none in the parts listed by a merged result).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latency_hdr: String,
    /// CPU time (user + system) of the load's process from the start of
    /// measuring to the last echo (summed over processes and merged parts).
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// That CPU time per echo, in microseconds (echo mode).
    #[serde(default)]
    pub cpu_us_per_echo: Option<f64>,
    pub errors: Errors,
    /// Client loop stats, as `iomux serve` writes its own (merged by
    /// `ServerStats::merge` when results merge).
    #[serde(default)]
    pub client: crate::stats::ServerStats,
    /// `--procs`: each child's result, less its histogram.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procs: Vec<ChildResult>,
    /// `iomux merge`: each file's result, less its histogram.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_files: Vec<MergedFile>,
}

/// One `--procs` child's result (less its histogram), or why it has none.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum ChildResult {
    Failed { process: usize, failed: String, exit: String },
    Done(Box<LoadResult>),
}

/// By hand, not `untagged`: a child's entry that does not read says which
/// field is wrong, not only that no variant matched.
impl<'de> Deserialize<'de> for ChildResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ChildResult, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        struct Failed {
            process: usize,
            failed: String,
            exit: String,
        }
        let v = Value::deserialize(d)?;
        if v.get("failed").is_some() {
            let Failed { process, failed, exit } =
                serde_json::from_value(v).map_err(|e| D::Error::custom(format!("a failed child's entry: {e}")))?;
            return Ok(ChildResult::Failed { process, failed, exit });
        }
        let result = serde_json::from_value(v).map_err(|e| D::Error::custom(format!("a child's result: {e}")))?;
        Ok(ChildResult::Done(Box::new(result)))
    }
}

/// One file `iomux merge` read.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MergedFile {
    pub file: String,
    #[serde(flatten)]
    pub result: LoadResult,
}

/// A shard's place in the whole load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardOf {
    pub index: u32,
    pub count: u32,
    /// The whole load's connections, over all shards.
    pub of_conns: u64,
    pub of_idle: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    pub count: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Errors {
    pub total: u64,
    pub mismatches: u64,
    pub unexpected_closes: u64,
    /// Of the unexpected closes: the server vanished (keepalive or user
    /// timeout), and reset by the server.
    #[serde(default)]
    pub vanished: u64,
    #[serde(default)]
    pub resets: u64,
    /// New connections opened in place of those closed early (--reconnect).
    #[serde(default)]
    pub reconnects: u64,
    pub unanswered: u64,
    /// Failed connects by errno name.
    pub connect: BTreeMap<String, u64>,
    pub first: Option<String>,
}

impl Errors {
    pub fn sum(&self) -> u64 {
        self.mismatches + self.unexpected_closes + self.unanswered + self.connect.values().sum::<u64>()
    }
}

fn per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

impl LoadResult {
    /// The result of one process's run.
    pub fn of_run(
        args: &LoadArgs,
        r: &Report,
        stats: &iomux::runtime::LoopStats,
        clock: &UnixClock,
    ) -> CliResult<LoadResult> {
        let window = r.setup.map(|(a, b)| (clock.unix(a).as_secs_f64(), clock.unix(b).as_secs_f64()));
        let measure_window =
            r.measure_start.zip(r.measure_end).map(|(a, b)| (clock.unix(a).as_secs_f64(), clock.unix(b).as_secs_f64()));
        let mut result = LoadResult {
            kind: KIND.into(),
            connect: args.connect.to_string(),
            conns: args.conns as u64,
            idle: args.idle as u64,
            threads: u64::from(args.threads),
            msg_size: u64::from(args.msg_size),
            mode: mode_name(args.mode),
            rate: args.rate,
            tick_us: args.rate.map(|_| u64::from(args.tick_us)),
            backend: args.backend.name().into(),
            first_conn: u64::from(args.first_conn),
            shard: None,
            connected: r.connected,
            seconds: measure_window.map_or(r.measured.as_secs_f64(), |(a, b)| b - a),
            measure_window,
            drained_at: r.drained.map(|t| clock.unix(t).as_secs_f64()),
            setup_s: window.map_or(0.0, |(a, b)| b - a),
            setup_window: window,
            listen_overflows: None,
            retransmits: None,
            echoes: r.echoes,
            echo_bytes: r.echo_bytes,
            sent_messages: r.sent_messages,
            sent_bytes: r.sent_bytes,
            echoes_per_sec: 0.0,
            mb_per_sec: 0.0,
            latency: None,
            latency_hdr: String::new(),
            cpu_s: r.cpu.map(|(start, end)| end.saturating_sub(start).as_secs_f64()),
            cpu_us_per_echo: None,
            errors: Errors {
                total: 0,
                mismatches: r.mismatches,
                unexpected_closes: r.unexpected_closes,
                vanished: r.vanished,
                resets: r.resets,
                reconnects: r.reconnects,
                unanswered: r.unanswered,
                connect: r.connect_errors.clone(),
                first: r.first_error.clone(),
            },
            client: crate::stats::server_stats(stats, args.backend)?,
            procs: Vec::new(),
            merged_files: Vec::new(),
        };
        result.derive(&r.latency)?;
        Ok(result)
    }

    /// Sets every figure that follows from the counts and the histogram.
    pub fn derive(&mut self, h: &Histogram<u64>) -> CliResult<()> {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        self.latency = (!h.is_empty()).then(|| Latency {
            p50_us: us(0.5),
            p90_us: us(0.9),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: h.max() as f64 / 1000.0,
            mean_us: h.mean() / 1000.0,
            count: h.len(),
        });
        self.latency_hdr = hist::to_base64(h)?;
        self.errors.total = self.errors.sum();
        self.echoes_per_sec = per_sec(self.echoes, self.seconds);
        let bytes = if self.mode == mode_name(LoadMode::Sink) { self.sent_bytes } else { self.echo_bytes };
        self.mb_per_sec = per_sec(bytes, self.seconds) / 1e6;
        let echo = self.mode == mode_name(LoadMode::Echo);
        self.cpu_us_per_echo = self.cpu_s.filter(|_| echo && self.echoes > 0).map(|s| s * 1e6 / self.echoes as f64);
        Ok(())
    }

    pub fn histogram(&self) -> CliResult<Histogram<u64>> {
        hist::from_base64(&self.latency_hdr)
    }

    pub fn to_json(&self) -> CliResult<Value> {
        Ok(serde_json::to_value(self)?)
    }

    /// The figures without the histogram, for a merged result's list of parts.
    pub fn summary(&self) -> LoadResult {
        LoadResult { latency_hdr: String::new(), ..self.clone() }
    }

    /// Reads a result file; the error names the file and what is wrong.
    pub fn read(path: &Path) -> CliResult<LoadResult> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let value: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        if value.get("kind").and_then(Value::as_str) != Some(KIND) {
            bail!(
                "{} is not an `iomux load --json` result (no \"kind\": \"{KIND}\"; results of older versions \
                 lack the histogram and cannot be merged exactly)",
                path.display()
            );
        }
        let result: LoadResult =
            serde_json::from_value(value).with_context(|| format!("{}: not a complete load result", path.display()))?;
        // Only the parts a merged result lists go without one.
        if result.latency_hdr.is_empty() {
            bail!("{}: not a complete load result: no latency_hdr", path.display());
        }
        Ok(result)
    }
}

pub fn mode_name(mode: LoadMode) -> String {
    format!("{mode:?}").to_lowercase()
}
