//! Loop stats as JSON, the same shape for serve and load.

use crate::CliResult;
use anyhow::{anyhow, Context as _};
use iomux::runtime::LoopStats;
use iomux::Backend;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// A loop's (or a server's, workers summed) figures: what `--stats-file`
/// holds and what the lab reads back, one type for both.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerStats {
    pub backend: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    pub loops: u64,
    pub accepted: u64,
    pub connected: u64,
    pub closed: u64,
    pub closed_abnormally: u64,
    /// Of them, peers that vanished (keepalive or the user timeout).
    pub vanished: u64,
    /// Idle connections closed (`--idle-timeout`).
    pub idle_closed: u64,
    pub refused: u64,
    pub accept_backoffs: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Of `bytes_in`, bytes spliced between connections (a proxy's
    /// `--splice`), never copied into the server.
    #[serde(default)]
    pub spliced_bytes: u64,
    pub messages: u64,
    /// The most messages a loop's inbox held at once (pub/sub deliveries
    /// between loops).
    #[serde(default)]
    pub inbox_peak: u64,
    /// Messages a full inbox refused (and that waited their turn).
    #[serde(default)]
    pub inbox_refused: u64,
    /// Sends of several buffers at once (shared values behind a head).
    pub gathered_sends: u64,
    pub turns: u64,
    pub peak_output_bytes: u64,
    pub peak_conns: u64,
    /// By the call's name (`epoll_pwait`, `recvfrom`, ...).
    pub syscalls: BTreeMap<String, u64>,
    pub syscalls_total: u64,
    pub user_cpu_s: f64,
    pub sys_cpu_s: f64,
    pub peak_rss_bytes: u64,
    pub wall_s: f64,
    pub uring_setup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uring_features: Option<BTreeMap<String, FeatureState>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_copy_sends: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_copy_copied: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_responses: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_timeouts: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resp_replies: Option<u64>,
    /// Of them, error replies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resp_errors: Option<u64>,
    /// A proxy's connections by how they ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<crate::apps::proxy::ProxyCounts>,
    /// What a RESP server's pub/sub did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pubsub: Option<crate::apps::pubsub::PubsubCounts>,
    /// A TLS server's handshakes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsCounts>,
}

/// A TLS server's handshakes, every loop's together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlsCounts {
    /// Completed with a certificate and a key exchange.
    pub full_handshakes: u64,
    /// Completed by resuming an earlier session.
    pub resumed_handshakes: u64,
    /// Connections closed by a TLS error (an alert, a record that does
    /// not decrypt, a FIN during the handshake or inside a record) or the
    /// handshake timeout, or refused a layer; not resets.
    pub failed: u64,
}

impl TlsCounts {
    fn add(&mut self, o: &TlsCounts) {
        self.full_handshakes += o.full_handshakes;
        self.resumed_handshakes += o.resumed_handshakes;
        self.failed += o.failed;
    }
}

/// One optional io_uring feature as a loop ran it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureState {
    pub requested: bool,
    pub active: bool,
    pub why_not: Option<String>,
}

impl ServerStats {
    /// User + system CPU seconds.
    pub fn cpu_s(&self) -> f64 {
        self.user_cpu_s + self.sys_cpu_s
    }

    /// Syscalls of one kind.
    pub fn syscalls_of(&self, kind: iomux::Syscall) -> u64 {
        self.syscalls.get(kind.name()).copied().unwrap_or(0)
    }

    /// Adds another process's (or loop's) figures, as `LoopStats::merge`
    /// merges loops: counts, CPU time, peak connections and peak RSS add
    /// (peaks of processes need not coincide: the sum bounds the whole
    /// from above); the wall time is the longest, and one connection's
    /// peak output and one inbox's peak the largest. Text that differs
    /// becomes "a, b"; what one side lacks, the other gives.
    pub fn merge(&mut self, o: &ServerStats) {
        for (sum, add) in [
            (&mut self.loops, o.loops),
            (&mut self.accepted, o.accepted),
            (&mut self.connected, o.connected),
            (&mut self.closed, o.closed),
            (&mut self.closed_abnormally, o.closed_abnormally),
            (&mut self.vanished, o.vanished),
            (&mut self.idle_closed, o.idle_closed),
            (&mut self.refused, o.refused),
            (&mut self.accept_backoffs, o.accept_backoffs),
            (&mut self.bytes_in, o.bytes_in),
            (&mut self.bytes_out, o.bytes_out),
            (&mut self.spliced_bytes, o.spliced_bytes),
            (&mut self.messages, o.messages),
            (&mut self.inbox_refused, o.inbox_refused),
            (&mut self.gathered_sends, o.gathered_sends),
            (&mut self.turns, o.turns),
            (&mut self.peak_conns, o.peak_conns),
            (&mut self.syscalls_total, o.syscalls_total),
            (&mut self.peak_rss_bytes, o.peak_rss_bytes),
        ] {
            *sum += add;
        }
        for (kind, n) in &o.syscalls {
            *self.syscalls.entry(kind.clone()).or_default() += n;
        }
        self.user_cpu_s += o.user_cpu_s;
        self.sys_cpu_s += o.sys_cpu_s;
        self.wall_s = self.wall_s.max(o.wall_s);
        self.peak_output_bytes = self.peak_output_bytes.max(o.peak_output_bytes);
        self.inbox_peak = self.inbox_peak.max(o.inbox_peak);
        self.backend = joined(&self.backend, &o.backend);
        self.proto = both(self.proto.take(), o.proto.clone(), |a, b| joined(&a, &b));
        self.uring_setup = both(self.uring_setup.take(), o.uring_setup.clone(), |a, b| joined(&a, &b));
        // One configuration's features: the first side's.
        self.uring_features = self.uring_features.take().or_else(|| o.uring_features.clone());
        for (sum, add) in [
            (&mut self.zero_copy_sends, o.zero_copy_sends),
            (&mut self.zero_copy_copied, o.zero_copy_copied),
            (&mut self.http_responses, o.http_responses),
            (&mut self.http_timeouts, o.http_timeouts),
            (&mut self.resp_replies, o.resp_replies),
            (&mut self.resp_errors, o.resp_errors),
        ] {
            *sum = both(sum.take(), add, |a, b| a + b);
        }
        self.proxy = both(self.proxy.take(), o.proxy, |mut a, b| {
            a.add(&b);
            a
        });
        self.pubsub = both(self.pubsub.take(), o.pubsub, |mut a, b| {
            a.add(&b);
            a
        });
        self.tls = both(self.tls.take(), o.tls, |mut a, b| {
            a.add(&b);
            a
        });
    }
}

/// `a` and `b` combined by `f` when both are known, else whichever is.
fn both<T>(a: Option<T>, b: Option<T>, f: impl FnOnce(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}

/// `a`, or "a, b" when they differ (an empty side gives way).
fn joined(a: &str, b: &str) -> String {
    if a == b || b.is_empty() {
        a.to_string()
    } else if a.is_empty() {
        b.to_string()
    } else {
        let mut names: Vec<&str> = a.split(", ").chain(b.split(", ")).collect();
        names.sort_unstable();
        names.dedup();
        names.join(", ")
    }
}

/// A process's figures from its loops' stats and its own usage.
pub fn server_stats(stats: &LoopStats, backend: Backend) -> CliResult<ServerStats> {
    let usage = crate::os::usage().context("getrusage")?;
    let uring = !stats.uring_features.is_empty();
    let typed = ServerStats {
        backend: backend.name().into(),
        proto: None,
        loops: stats.loops,
        accepted: stats.accepted,
        connected: stats.connected,
        closed: stats.closed,
        closed_abnormally: stats.closed_abnormally,
        vanished: stats.vanished,
        idle_closed: stats.idle_closed,
        refused: stats.refused,
        accept_backoffs: stats.accept_backoffs,
        bytes_in: stats.bytes_in,
        bytes_out: stats.bytes_out,
        spliced_bytes: stats.spliced,
        messages: stats.reads,
        inbox_peak: stats.inbox_peak,
        inbox_refused: stats.inbox_refused,
        gathered_sends: stats.gathered_sends,
        turns: stats.turns,
        peak_output_bytes: stats.peak_output,
        peak_conns: stats.peak_conns,
        syscalls: stats.syscalls.nonzero().map(|(kind, n)| (kind.name().to_string(), n)).collect(),
        syscalls_total: stats.syscalls.total(),
        user_cpu_s: usage.user.as_secs_f64(),
        sys_cpu_s: usage.system.as_secs_f64(),
        peak_rss_bytes: crate::os::peak_rss().unwrap_or(usage.peak_rss),
        wall_s: stats.wall.as_secs_f64(),
        uring_setup: stats.uring_setup.map(str::to_string),
        uring_features: uring.then(|| {
            stats
                .uring_features
                .iter()
                .map(|f| {
                    let state = FeatureState { requested: f.requested, active: f.active, why_not: f.why_not.clone() };
                    (f.name.to_string(), state)
                })
                .collect()
        }),
        zero_copy_sends: uring.then_some(stats.zero_copy_sends),
        zero_copy_copied: uring.then_some(stats.zero_copy_copied),
        http_responses: None,
        http_timeouts: None,
        resp_replies: None,
        resp_errors: None,
        proxy: None,
        pubsub: None,
        tls: None,
    };
    Ok(typed)
}

/// A server's figures in one line (a merged server's the same way).
pub fn summary(st: &ServerStats) -> String {
    // An HTTP server also says what it answered, per request.
    let http = match st.http_responses {
        Some(r) => format!(
            "; {r} HTTP responses ({:.3} syscalls each), {} connections timed out",
            st.syscalls_total as f64 / r.max(1) as f64,
            st.http_timeouts.unwrap_or(0)
        ),
        None => String::new(),
    };
    let line = format!(
        "{} connections accepted, {} closed ({} abnormally, of them {} vanished; {} idle; {} refused); \
         {} bytes in, {} out; {} syscalls ({:.3} per read); cpu user {:.3}s sys {:.3}s; peak RSS {} KiB",
        st.accepted,
        st.closed,
        st.closed_abnormally,
        st.vanished,
        st.idle_closed,
        st.refused,
        st.bytes_in,
        st.bytes_out,
        st.syscalls_total,
        st.syscalls_total as f64 / st.messages.max(1) as f64,
        st.user_cpu_s,
        st.sys_cpu_s,
        st.peak_rss_bytes / 1024,
    );
    // A proxy also says how its connections ended.
    let proxy = match &st.proxy {
        Some(p) => format!(
            "; proxied {} (upstream failed {}, timed out {}, reset {}; clients reset {}; errors {}; idle {})",
            p.relayed, p.upstream_failed, p.upstream_timeouts, p.upstream_resets, p.client_resets, p.errors, p.idle
        ),
        None => String::new(),
    };
    let tls = match &st.tls {
        Some(t) => format!(
            "; TLS handshakes {} full, {} resumed, {} connections failed",
            t.full_handshakes, t.resumed_handshakes, t.failed
        ),
        None => String::new(),
    };
    line + &http + &proxy + &tls
}

/// Refuses, before any work starts, a path [`write_json`] could not write
/// at the end: its folder must exist and be writable, and the path must
/// not be a folder itself. Nothing is created or opened: a run that then
/// fails for another reason leaves no empty file behind, and a file that
/// is there keeps its figures until the new ones replace them.
pub fn check_writable(path: &Path) -> CliResult<()> {
    let refuse = |why: &str| anyhow!("cannot write {}: {why}", path.display());
    if path.is_dir() {
        return Err(refuse("it is a directory"));
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(folder) {
        Err(e) => return Err(e).with_context(|| format!("cannot write {}: {}", path.display(), folder.display())),
        Ok(m) if !m.is_dir() => return Err(refuse(&format!("{} is not a directory", folder.display()))),
        Ok(_) => {}
    }
    let existing = if path.exists() { path } else { folder };
    let c_path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes())
        .map_err(|_| refuse("the path holds a NUL byte"))?;
    // SAFETY: c_path is a NUL-terminated string that outlives the call.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(e).with_context(|| format!("cannot write {}: {}", path.display(), existing.display()));
    }
    Ok(())
}

pub fn write_json(path: &Path, value: &Value) -> CliResult<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod merge_tests {
    use super::*;
    use crate::apps::proxy::ProxyCounts;

    fn stats(v: serde_json::Value) -> ServerStats {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn merging_sums_counters_keeps_maxima_and_joins_text() {
        let mut m = stats(serde_json::json!({"backend": "epoll", "accepted": 2, "bytes_out": 10, "peak_conns": 2,
            "wall_s": 1.5, "user_cpu_s": 0.25, "peak_output_bytes": 7, "inbox_peak": 3, "peak_rss_bytes": 1000,
            "syscalls": {"read": 3, "accept4": 2}}));
        let b = stats(serde_json::json!({"backend": "uring", "accepted": 3, "bytes_out": 5, "peak_conns": 3,
            "wall_s": 2.0, "user_cpu_s": 0.5, "peak_output_bytes": 4, "inbox_peak": 9, "peak_rss_bytes": 500,
            "syscalls": {"read": 1, "write": 4}, "uring_setup": "sqpoll"}));
        m.merge(&b);
        assert_eq!((m.accepted, m.bytes_out, m.peak_conns, m.peak_rss_bytes), (5, 15, 5, 1500));
        assert_eq!((m.wall_s, m.user_cpu_s), (2.0, 0.75));
        assert_eq!((m.peak_output_bytes, m.inbox_peak), (7, 9), "one connection's, one inbox's: the largest");
        let want: BTreeMap<String, u64> =
            [("read", 4), ("accept4", 2), ("write", 4)].map(|(k, n)| (k.into(), n)).into();
        assert_eq!(m.syscalls, want);
        assert_eq!(m.uring_setup.as_deref(), Some("sqpoll"), "what one side lacks, the other gives");
        assert_eq!(m.backend, "epoll, uring");
        assert_eq!(m.http_responses, None, "only http servers count responses");
    }

    #[test]
    fn protocol_counts_add_where_known() {
        let part = |responses: u64, relayed: u64| ServerStats {
            http_responses: Some(responses),
            resp_replies: None,
            proxy: Some(ProxyCounts { relayed, ..Default::default() }),
            ..Default::default()
        };
        let mut m = part(5, 1);
        m.merge(&part(7, 2));
        m.merge(&ServerStats { resp_replies: Some(4), ..Default::default() });
        assert_eq!((m.http_responses, m.resp_replies), (Some(12), Some(4)));
        assert_eq!(m.proxy.map(|p| p.relayed), Some(3));
    }
}
