//! Loop stats as JSON, the same shape for serve and load.

use crate::CliResult;
use iomux::runtime::LoopStats;
use iomux::Backend;
use serde_json::{json, Map, Value};
use std::path::Path;

pub fn stats_json(stats: &LoopStats, backend: Backend, extra: &[(&str, String)]) -> CliResult<Value> {
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
    for (k, val) in extra {
        v[*k] = json!(val);
    }
    Ok(v)
}

pub fn write_json(path: &Path, value: &Value) -> CliResult<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(())
}
