//! Merging load results exactly (the children of `--procs`, shards, or
//! separate runs; `iomux merge`): counts and errors add, the latency
//! histograms add (percentiles are read from the sum, never averaged),
//! the measured time is the longest, client stats add.

use super::result::{LoadResult, MergedFile};
use super::summary;
use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Results of `iomux load --json` to merge: shards, processes or
    /// separate runs of the same message size and mode. Counts and
    /// latency merge exactly; echoes/s is total echoes over the longest
    /// part's time, which overstates the rate of parts that did not run
    /// at the same time.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Write the merged result here, in the same form (so merged results
    /// merge again).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One result to merge, and how to name it in messages.
pub struct Part {
    pub label: String,
    pub result: LoadResult,
}

/// How the merged setup time is read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Setup {
    /// The parts ran together on one host: from the first connect of any
    /// to the last connection of any (one clock, so exact).
    Span,
    /// Parts from other hosts or times: the longest part's setup (clocks
    /// of different hosts do not agree well enough for a span).
    Longest,
}

pub fn run(args: MergeArgs) -> CliResult<ExitCode> {
    if let Some(path) = &args.json {
        crate::stats::check_writable(path)?;
    }
    let mut seen = BTreeMap::new();
    let mut parts = Vec::new();
    for path in &args.files {
        let canonical = path.canonicalize().with_context(|| format!("reading {}", path.display()))?;
        if let Some(earlier) = seen.insert(canonical, path.display().to_string()) {
            bail!("{} and {earlier} are the same file: merging it twice would count it twice", path.display());
        }
        parts.push(Part { label: path.display().to_string(), result: LoadResult::read(path)? });
    }
    check_shards(&parts)?;
    let mut merged = merge(&parts, Setup::Longest)?;
    for p in &parts {
        merged.merged_files.push(MergedFile { file: p.label.clone(), result: p.result.summary() });
    }
    summary::conclude("iomux merge", &merged, args.json.as_deref(), true, &[])
}

/// Shards of one job: the same count and whole load, each index once.
/// Missing shards are allowed (a rerun may come later) but said.
fn check_shards(parts: &[Part]) -> CliResult<()> {
    let mut first: Option<&Part> = None;
    let mut indexes: BTreeMap<u32, &str> = BTreeMap::new();
    for p in parts {
        let Some(s) = p.result.shard else { continue };
        let Some(f) = first else {
            first = Some(p);
            indexes.insert(s.index, &p.label);
            continue;
        };
        let Some(fs) = f.result.shard else { continue };
        if (s.count, s.of_conns, s.of_idle) != (fs.count, fs.of_conns, fs.of_idle) {
            bail!(
                "{} is shard {}/{} of {}+{} connections, but {} is shard {}/{} of {}+{}: not shards of one load",
                p.label,
                s.index,
                s.count,
                s.of_conns,
                s.of_idle,
                f.label,
                fs.index,
                fs.count,
                fs.of_conns,
                fs.of_idle
            );
        }
        if let Some(other) = indexes.insert(s.index, &p.label) {
            bail!(
                "{} and {other} are both shard {}/{}: merging both would count that shard twice",
                p.label,
                s.index,
                s.count
            );
        }
    }
    if let Some(count) = first.and_then(|f| f.result.shard).map(|s| s.count) {
        let missing: Vec<String> = (0..count).filter(|i| !indexes.contains_key(i)).map(|i| i.to_string()).collect();
        if !missing.is_empty() {
            eprintln!(
                "iomux merge: warning: shards {} of {count} are missing: the result covers part of the load",
                missing.join(", ")
            );
        }
    }
    Ok(())
}

/// Merges `parts` (at least one). Refuses parts whose figures do not mean
/// the same thing: another message size, mode, or open versus closed loop.
pub fn merge(parts: &[Part], setup: Setup) -> CliResult<LoadResult> {
    let Some(first) = parts.first() else {
        bail!("nothing to merge");
    };
    let f = &first.result;
    let mut latency = super::hist::latency_histogram();
    let mut m = LoadResult {
        conns: 0,
        idle: 0,
        threads: 0,
        rate: None,
        first_conn: u64::MAX,
        shard: None,
        connected: 0,
        seconds: 0.0,
        setup_s: 0.0,
        setup_window: None,
        measure_window: None,
        drained_at: None,
        listen_overflows: None,
        retransmits: None,
        cpu_s: Some(0.0),
        echoes: 0,
        echo_bytes: 0,
        sent_messages: 0,
        sent_bytes: 0,
        errors: Default::default(),
        client: Default::default(),
        procs: Vec::new(),
        merged_files: Vec::new(),
        ..f.clone()
    };
    let (mut connects, mut backends) = (Vec::new(), Vec::new());
    for Part { label, result: r } in parts {
        let differs = |what: &str, this: String, that: String| -> CliResult<()> {
            if this == that {
                return Ok(());
            }
            Err(anyhow!(
                "{label}: {what} is {this}, but {} has {that}: their latencies and counts do not add up to one load",
                first.label
            ))
        };
        differs("msg_size", r.msg_size.to_string(), f.msg_size.to_string())?;
        differs("mode", r.mode.clone(), f.mode.clone())?;
        let looped = |r: &LoadResult| if r.rate.is_some() { "open loop (--rate)" } else { "closed loop" }.to_string();
        // A part with idle connections only sends nothing: no loop to compare.
        if r.conns > 0 && f.conns > 0 {
            differs("the loop", looped(r), looped(f))?;
        }
        let h = r.histogram().with_context(|| label.clone())?;
        super::hist::add(&mut latency, &h).with_context(|| label.clone())?;
        m.conns += r.conns;
        m.idle += r.idle;
        m.threads += r.threads;
        m.rate = match (m.rate, r.rate) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        m.first_conn = m.first_conn.min(r.first_conn);
        m.connected += r.connected;
        m.seconds = m.seconds.max(r.seconds);
        m.setup_s = m.setup_s.max(r.setup_s);
        m.listen_overflows = sum(m.listen_overflows, r.listen_overflows);
        m.retransmits = sum(m.retransmits, r.retransmits);
        m.setup_window = span(m.setup_window, r.setup_window);
        m.measure_window = span(m.measure_window, r.measure_window);
        m.drained_at = match (m.drained_at, r.drained_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        // A part that did not measure its CPU leaves the sum unknown.
        m.cpu_s = m.cpu_s.zip(r.cpu_s).map(|(a, b)| a + b);
        m.echoes += r.echoes;
        m.echo_bytes += r.echo_bytes;
        m.sent_messages += r.sent_messages;
        m.sent_bytes += r.sent_bytes;
        let e = &mut m.errors;
        e.mismatches += r.errors.mismatches;
        e.unexpected_closes += r.errors.unexpected_closes;
        e.vanished += r.errors.vanished;
        e.resets += r.errors.resets;
        e.reconnects += r.errors.reconnects;
        e.unanswered += r.errors.unanswered;
        for (kind, n) in &r.errors.connect {
            *e.connect.entry(kind.clone()).or_default() += n;
        }
        if e.first.is_none() {
            e.first = r.errors.first.as_ref().map(|x| format!("{label}: {x}"));
        }
        m.client.merge(&r.client);
        connects.push(r.connect.clone());
        backends.push(r.backend.clone());
    }
    if setup == Setup::Span {
        if let Some((a, b)) = m.setup_window {
            m.setup_s = b - a;
        }
        if let Some((a, b)) = m.measure_window {
            m.seconds = b - a;
        }
    }
    m.connect = distinct(connects);
    m.backend = distinct(backends);
    m.derive(&latency)?;
    Ok(m)
}

/// The window from the earlier start to the later end.
fn span(a: Option<(f64, f64)>, b: Option<(f64, f64)>) -> Option<(f64, f64)> {
    match (a, b) {
        (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
        (a, b) => a.or(b),
    }
}

/// `a` or, when parts differ, `a, b`.
fn distinct(mut v: Vec<String>) -> String {
    v.sort();
    v.dedup();
    v.join(", ")
}

/// Two parts' counts added; unknown where neither knows.
fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A part as `--procs` writes it: `conns` active connections, `rate`,
    /// measuring from `window.0` to `window.1` (Unix seconds), one echo.
    fn part(label: &str, conns: u64, idle: u64, rate: Option<f64>, window: (f64, f64)) -> Part {
        let mut h = crate::load::hist::latency_histogram();
        h.record(1_000).unwrap();
        let v = json!({
            "kind": crate::load::result::KIND, "connect": "127.0.0.1:1", "conns": conns, "idle": idle,
            "threads": 1, "msg_size": 100, "mode": "echo", "rate": rate, "backend": "epoll",
            "first_conn": 0, "connected": conns + idle, "seconds": window.1 - window.0,
            "setup_s": 0.5, "setup_window": [window.0 - 0.5, window.0], "measure_window": [window.0, window.1],
            "echoes": 1, "echo_bytes": 100, "sent_messages": 1, "sent_bytes": 100,
            "echoes_per_sec": 0.0, "mb_per_sec": 0.0, "latency": null,
            "latency_hdr": crate::load::hist::to_base64(&h).unwrap(), "errors": {"total": 0, "mismatches": 0,
            "unexpected_closes": 0, "unanswered": 0, "connect": {}, "first": null}, "client": {},
        });
        Part { label: label.into(), result: serde_json::from_value(v).unwrap() }
    }

    #[test]
    fn idle_only_parts_merge_with_open_loop_ones_and_time_spans_every_part() {
        let parts = [
            part("a", 2, 0, Some(100.0), (1000.0, 1010.0)),
            part("b", 0, 50, None, (1002.0, 1012.0)),
            part("c", 2, 0, Some(100.0), (1001.0, 1011.0)),
        ];
        let m = merge(&parts, Setup::Span).unwrap();
        assert_eq!(m.rate, Some(200.0), "the idle-only part adds no rate and takes none away");
        assert_eq!((m.conns, m.idle, m.echoes), (4, 50, 3));
        assert_eq!(m.seconds, 12.0, "from the first part's start to the last part's end");
        assert_eq!(m.measure_window, Some((1000.0, 1012.0)));
        let closed = part("d", 2, 0, None, (1000.0, 1010.0));
        let open = part("e", 2, 0, Some(100.0), (1000.0, 1010.0));
        assert!(merge(&[open, closed], Setup::Span).is_err(), "open and closed loops differ");
    }
}
