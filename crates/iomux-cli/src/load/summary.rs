//! The terminal summary of a load result: the same for one process,
//! `--procs`, a shard, and `iomux merge`.

use super::result::LoadResult;
use super::watch::thousands;

pub fn print(r: &LoadResult) {
    let loop_kind = match (r.mode.as_str(), r.rate) {
        ("sink", _) => "sink".to_string(),
        (_, Some(rate)) => format!("echo, open loop at {rate} msg/s"),
        _ => "echo, closed loop".to_string(),
    };
    let mut parts = Vec::new();
    if !r.procs.is_empty() {
        parts.push(format!("{} processes", r.procs.len()));
    }
    if let Some(s) = r.shard {
        parts.push(format!("shard {}/{} of {} connections", s.index, s.count, thousands(s.of_conns + s.of_idle)));
    }
    if !r.merged_files.is_empty() {
        parts.push(format!("merged from {} files", r.merged_files.len()));
    }
    let parts = if parts.is_empty() { String::new() } else { format!(" [{}]", parts.join(", ")) };
    println!(
        "iomux load: {} connections (+{} idle) to {}, client backend {}, {} thread(s), {loop_kind}, {} B messages{parts}",
        r.conns, r.idle, r.connect, r.backend, r.threads, r.msg_size
    );
    let overflows = r
        .listen_overflows
        .map_or(String::new(), |n| format!("; {} listen-queue overflows on this machine meanwhile", thousands(n)));
    let overflows = match r.retransmits {
        Some(n) if n > 0 => {
            format!("{overflows}; {} TCP segments retransmitted in this network namespace", thousands(n))
        }
        _ => overflows,
    };
    println!(
        "  {} of {} connected in {:.2} s{overflows}",
        thousands(r.connected),
        thousands(r.conns + r.idle),
        r.setup_s
    );
    let secs = r.seconds;
    if r.mode == "sink" {
        println!(
            "  {secs:.2} s: {} messages sent, {:.0} msg/s, {:.2} MB/s",
            r.sent_messages,
            if secs > 0.0 { r.sent_messages as f64 / secs } else { 0.0 },
            r.mb_per_sec
        );
    } else {
        println!(
            "  {secs:.2} s: {} echoes verified, {:.0} echoes/s, {:.2} MB/s each way",
            r.echoes, r.echoes_per_sec, r.mb_per_sec
        );
        if let Some(l) = &r.latency {
            println!(
                "  latency (us): p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
                l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
            );
        }
    }
    if let Some(cpu) = r.cpu_s {
        let per_echo = r.cpu_us_per_echo.map_or(String::new(), |us| format!(", {us:.3} us per echo"));
        println!("  load CPU: {cpu:.3} s while measuring ({:.0}% of one core){per_echo}", 100.0 * cpu / secs.max(1e-9));
    }
    let e = &r.errors;
    let connect: Vec<String> = e.connect.iter().map(|(k, v)| format!("{k} x{v}")).collect();
    println!(
        "  errors: {} mismatched, {} closed early ({} vanished, {} reset; {} reconnected), {} unanswered, connect \
         errors: {}",
        e.mismatches,
        e.unexpected_closes,
        e.vanished,
        e.resets,
        e.reconnects,
        e.unanswered,
        if connect.is_empty() { "none".to_string() } else { connect.join(", ") }
    );
}

/// The end of a run (`who`: "iomux load" or "iomux merge"): the summary
/// (unless a parent process prints its own), the JSON file, and the exit
/// status: non-zero if anything failed (`failed`: processes that gave no
/// result) or any error was counted.
pub fn conclude(
    who: &str,
    r: &LoadResult,
    json: Option<&std::path::Path>,
    print_summary: bool,
    failed: &[String],
) -> crate::CliResult<std::process::ExitCode> {
    if print_summary {
        print(r);
    }
    if let Some(path) = json {
        crate::stats::write_json(path, &r.to_json()?)?;
    }
    for f in failed {
        eprintln!("{who}: {f}");
    }
    if r.errors.total > 0 {
        let first = r.errors.first.as_ref().map_or(String::new(), |e| format!("; first: {e}"));
        eprintln!("{who}: {} errors{first}", r.errors.total);
    }
    Ok(if failed.is_empty() && r.errors.total == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
