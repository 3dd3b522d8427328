//! Loop stats as JSON, the same shape for serve and load.

use crate::CliResult;
use iomux::runtime::LoopStats;
use iomux::Backend;
use serde_json::{json, Map, Value};
use std::path::Path;

pub fn stats_json(stats: &LoopStats, backend: Backend, extra: &[(&str, Value)]) -> CliResult<Value> {
    let usage = crate::os::usage().map_err(|e| format!("getrusage: {e}"))?;
    let mut syscalls = Map::new();
    for (kind, n) in stats.syscalls.nonzero() {
        syscalls.insert(kind.name().to_string(), json!(n));
    }
    let mut v = json!({
        "backend": backend.name(),
        "loops": stats.loops,
        "accepted": stats.accepted,
        "connected": stats.connected,
        "closed": stats.closed,
        "closed_abnormally": stats.closed_abnormally,
        "refused": stats.refused,
        "accept_backoffs": stats.accept_backoffs,
        "bytes_in": stats.bytes_in,
        "bytes_out": stats.bytes_out,
        "messages": stats.reads,
        "turns": stats.turns,
        "peak_output_bytes": stats.peak_output,
        "peak_conns": stats.peak_conns,
        "syscalls": syscalls,
        "syscalls_total": stats.syscalls.total(),
        "user_cpu_s": usage.user.as_secs_f64(),
        "sys_cpu_s": usage.system.as_secs_f64(),
        "peak_rss_bytes": crate::os::peak_rss().unwrap_or(usage.peak_rss),
        "wall_s": stats.wall.as_secs_f64(),
        "uring_setup": stats.uring_setup,
    });
    if !stats.uring_features.is_empty() {
        let mut features = Map::new();
        for f in &stats.uring_features {
            features.insert(
                f.name.to_string(),
                json!({"requested": f.requested, "active": f.active, "why_not": f.why_not}),
            );
        }
        v["uring_features"] = Value::Object(features);
        v["zero_copy_sends"] = json!(stats.zero_copy_sends);
        v["zero_copy_copied"] = json!(stats.zero_copy_copied);
    }
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
        "{} connections accepted, {} closed ({} abnormally, {} refused); \
         {} bytes in, {} out; {} syscalls ({:.3} per read); cpu user {:.3}s sys {:.3}s; peak RSS {} KiB",
        n("accepted"),
        n("closed"),
        n("closed_abnormally"),
        n("refused"),
        n("bytes_in"),
        n("bytes_out"),
        n("syscalls_total"),
        n("syscalls_total") as f64 / n("messages").max(1) as f64,
        s("user_cpu_s"),
        s("sys_cpu_s"),
        n("peak_rss_bytes") / 1024,
    );
    line + &http
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
