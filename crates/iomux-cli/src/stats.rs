//! Loop stats as JSON, the same shape for serve and load.

use crate::CliResult;
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
}

pub fn stats_json(stats: &LoopStats, backend: Backend, extra: &[(&str, Value)]) -> CliResult<Value> {
    let usage = crate::os::usage().map_err(|e| format!("getrusage: {e}"))?;
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
    };
    let mut v = serde_json::to_value(typed)?;
    for (k, val) in extra {
        v[*k] = val.clone();
    }
    Ok(v)
}

/// A server's figures in one line (from [`stats_json`]'s keys, so that
/// merged figures print the same way).
pub fn summary(stats: &Value) -> String {
    let n = |key: &str| stats[key].as_u64().unwrap_or(0);
    let s = |key: &str| stats[key].as_f64().unwrap_or(0.0);
    // An HTTP server also says what it answered, per request.
    let http = match stats["http_responses"].as_u64() {
        Some(r) => format!(
            "; {r} HTTP responses ({:.3} syscalls each), {} connections timed out",
            n("syscalls_total") as f64 / r.max(1) as f64,
            n("http_timeouts")
        ),
        None => String::new(),
    };
    let line = format!(
        "{} connections accepted, {} closed ({} abnormally, of them {} vanished; {} idle; {} refused); \
         {} bytes in, {} out; {} syscalls ({:.3} per read); cpu user {:.3}s sys {:.3}s; peak RSS {} KiB",
        n("accepted"),
        n("closed"),
        n("closed_abnormally"),
        n("vanished"),
        n("idle_closed"),
        n("refused"),
        n("bytes_in"),
        n("bytes_out"),
        n("syscalls_total"),
        n("syscalls_total") as f64 / n("messages").max(1) as f64,
        s("user_cpu_s"),
        s("sys_cpu_s"),
        n("peak_rss_bytes") / 1024,
    );
    // A proxy also says how its connections ended.
    let proxy = match stats["proxy"].as_object() {
        Some(p) => {
            let p = |key: &str| p.get(key).and_then(Value::as_u64).unwrap_or(0);
            format!(
                "; proxied {} (upstream failed {}, timed out {}, reset {}; clients reset {}; errors {}; idle {})",
                p("relayed"),
                p("upstream_failed"),
                p("upstream_timeouts"),
                p("upstream_resets"),
                p("client_resets"),
                p("errors"),
                p("idle")
            )
        }
        None => String::new(),
    };
    line + &http + &proxy
}

/// Refuses, before any work starts, a path [`write_json`] could not write
/// at the end: its folder must exist and be writable, and the path must
/// not be a folder itself. Nothing is created or opened: a run that then
/// fails for another reason leaves no empty file behind, and a file that
/// is there keeps its figures until the new ones replace them.
pub fn check_writable(path: &Path) -> CliResult<()> {
    let refuse = |why: String| format!("cannot write {}: {why}", path.display());
    if path.is_dir() {
        return Err(refuse("it is a directory".into()).into());
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(folder) {
        Err(e) => return Err(refuse(format!("{}: {e}", folder.display())).into()),
        Ok(m) if !m.is_dir() => return Err(refuse(format!("{} is not a directory", folder.display())).into()),
        Ok(_) => {}
    }
    let existing = if path.exists() { path } else { folder };
    let c_path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes())
        .map_err(|_| refuse("the path holds a NUL byte".into()))?;
    // SAFETY: c_path is a NUL-terminated string that outlives the call.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } != 0 {
        return Err(refuse(format!("{}: {}", existing.display(), std::io::Error::last_os_error())).into());
    }
    Ok(())
}

pub fn write_json(path: &Path, value: &Value) -> CliResult<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}
