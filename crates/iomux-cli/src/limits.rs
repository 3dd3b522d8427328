//! What the kernel allows against what a run needs: every setting that
//! would stop a large run, said before it starts, with the `sysctl -w`
//! that would lift it. Nothing here changes the system; the script
//! `scripts/tune-kernel` applies the fixes, printing before and after.

use anyhow::bail;
use std::fmt::Write as _;
use std::path::Path;

/// What a run will hold on this machine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Need {
    /// TCP sockets open at once on this machine (both ends when the server
    /// runs here too).
    pub sockets: u64,
    /// Connections towards one server address (ip:port): each needs its own
    /// (source address, source port) pair.
    pub conns_per_dest: u64,
    /// Source addresses the connections are spread over (0: none here).
    pub sources: u64,
    /// Descriptors one process of the run holds at most.
    pub fds_per_process: u64,
    /// Connections that may arrive at one listener at once (0: no listener).
    pub accept_burst: u64,
}

/// The kernel's settings that matter, read from /proc.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub file_max: u64,
    pub nr_open: u64,
    pub port_range: (u64, u64),
    pub somaxconn: u64,
    pub syn_backlog: u64,
    /// `(nf_conntrack_max, nf_conntrack_count)` when conntrack is loaded.
    pub conntrack: Option<(u64, u64)>,
    /// `tcp_mem` in pages: low, pressure, high. None where it cannot be
    /// read: inside a network namespace other than the host's (the
    /// setting is the host's, and only the host's namespace shows it).
    pub tcp_mem: Option<[u64; 3]>,
    /// RLIMIT_NOFILE's hard limit for this process.
    pub nofile_hard: u64,
    pub mem_total_bytes: u64,
}

/// One setting: what it is, what the run needs, and how to lift it.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub setting: &'static str,
    pub current: String,
    pub needed: String,
    /// The run cannot succeed as it stands.
    pub blocks: bool,
    /// A run can succeed but slower or less reliably (e.g. SYN retries).
    pub advice: bool,
    /// The command that lifts it, or what to do instead.
    pub fix: String,
}

fn read_u64s(path: &str) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(path).ok()?;
    text.split_whitespace().map(|w| w.parse().ok()).collect()
}

fn read_u64(path: &str) -> Option<u64> {
    read_u64s(path)?.first().copied()
}

impl Kernel {
    /// Reads the settings of this machine (missing values read as 0).
    pub fn read() -> Kernel {
        let ports = read_u64s("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
        let tcp_mem = read_u64s("/proc/sys/net/ipv4/tcp_mem");
        let conntrack = Path::new("/proc/sys/net/netfilter/nf_conntrack_max").exists().then(|| {
            (
                read_u64("/proc/sys/net/netfilter/nf_conntrack_max").unwrap_or(0),
                read_u64("/proc/sys/net/netfilter/nf_conntrack_count").unwrap_or(0),
            )
        });
        Kernel {
            file_max: read_u64("/proc/sys/fs/file-max").unwrap_or(0),
            nr_open: read_u64("/proc/sys/fs/nr_open").unwrap_or(0),
            port_range: (ports.first().copied().unwrap_or(0), ports.get(1).copied().unwrap_or(0)),
            somaxconn: read_u64("/proc/sys/net/core/somaxconn").unwrap_or(0),
            syn_backlog: read_u64("/proc/sys/net/ipv4/tcp_max_syn_backlog").unwrap_or(0),
            conntrack,
            tcp_mem: tcp_mem.map(|m| [0, 1, 2].map(|i| m.get(i).copied().unwrap_or(0))),
            nofile_hard: crate::os::nofile_limit().1,
            mem_total_bytes: crate::os::meminfo().map_or(0, |m| m.mem_total),
        }
    }

    /// Ports one source address can use towards one server address.
    pub fn ports(&self) -> u64 {
        (self.port_range.1 + 1).saturating_sub(self.port_range.0)
    }
}

/// Ports one source address may use from `(lo, hi)`: the range less 10%,
/// for the connections of other programs and sockets still in TIME_WAIT;
/// at least 1, so it can divide.
pub fn ports_per_source((lo, hi): (u64, u64)) -> u64 {
    ((hi + 1).saturating_sub(lo) * 9 / 10).max(1)
}

/// Connections one source address should carry towards one server
/// address. The port range allows 28,232, but connect()'s search for a free
/// port slows as the range fills: measured here, 5 loads of 19,000
/// connections each from 127.0.0.1 took 85 s to connect; from 4 source
/// addresses each (4,750 connections per address), 4 s.
pub const CONNS_PER_SOURCE: u64 = 5_000;

/// Descriptors a process keeps for itself beyond its connections (loops'
/// epoll or ring, wakers, listeners, stdio, the executable's own).
pub const FDS_OVERHEAD: u64 = 64;

/// TCP memory (`tcp_mem` counts pages) a socket holds while a small message
/// waits in it, as sockets-per-page: measured here, 95,000 loopback
/// connections echoing 100 B messages raised /proc/net/sockstat's TCP mem
/// by 95,488 pages, about one page per connection, i.e. per two sockets.
const SOCKETS_PER_TCP_PAGE: u64 = 2;

/// Pages of TCP memory `sockets` need.
fn tcp_pages(sockets: u64) -> u64 {
    sockets.div_ceil(SOCKETS_PER_TCP_PAGE)
}

/// The `tcp_mem` high mark to set for `pages`: twice them, for headroom,
/// but never more than half of the machine's memory.
fn tcp_mem_high(pages: u64, k: &Kernel) -> u64 {
    let half_of_memory = k.mem_total_bytes / 4096 / 2;
    (2 * pages).min(half_of_memory.max(k.tcp_mem.map_or(0, |m| m[2])))
}

/// Every setting checked, blocking ones first.
pub fn check(need: &Need, k: &Kernel) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut push = |setting, current: u64, needed: u64, blocks: bool, advice: bool, fix: String| {
        out.push(Finding {
            setting,
            current: current.to_string(),
            needed: needed.to_string(),
            blocks: blocks && current < needed,
            advice: advice && current < needed,
            fix,
        });
        out.len() - 1
    };
    let files = need.sockets + FDS_OVERHEAD;
    push("fs.file-max", k.file_max, files, true, false, format!("sysctl -w fs.file-max={}", files.max(k.file_max)));
    let per_proc = need.fds_per_process;
    push(
        "fs.nr_open",
        k.nr_open,
        per_proc,
        true,
        false,
        format!("sysctl -w fs.nr_open={per_proc} (then raise RLIMIT_NOFILE)"),
    );
    push(
        "RLIMIT_NOFILE (hard)",
        k.nofile_hard,
        per_proc,
        true,
        false,
        format!(
            "run more processes (--procs) so each holds at most {} descriptors, or raise the hard limit \
             (ulimit -Hn / limits.conf / systemd LimitNOFILE) where that is allowed",
            k.nofile_hard.saturating_sub(FDS_OVERHEAD)
        ),
    );
    let mut ports_at = None;
    let mut conntrack_idle_at = None;
    if need.conns_per_dest > 0 {
        let sources = need.sources.max(1);
        let reachable = k.ports().saturating_mul(sources);
        let at = push(
            "net.ipv4.ip_local_port_range",
            reachable,
            need.conns_per_dest,
            true,
            false,
            format!(
                "spread over {} or more source addresses (iomux load does so by itself towards a loopback \
                 server; --bind A-B otherwise) or sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"",
                need.conns_per_dest.div_ceil(ports_per_source(k.port_range))
            ),
        );
        ports_at = Some((
            at,
            format!("{}-{} ({} ports x {sources} source address(es))", k.port_range.0, k.port_range.1, k.ports()),
        ));
    }
    if need.accept_burst > 0 {
        let backlog = need.accept_burst.clamp(1, 65_535);
        push(
            "net.core.somaxconn",
            k.somaxconn,
            backlog,
            false,
            true,
            format!("sysctl -w net.core.somaxconn={backlog} (a fuller queue overflows and SYNs are retried after 1 s)"),
        );
        push(
            "net.ipv4.tcp_max_syn_backlog",
            k.syn_backlog,
            backlog,
            false,
            true,
            format!("sysctl -w net.ipv4.tcp_max_syn_backlog={backlog}"),
        );
    }
    if let Some((max, count)) = k.conntrack {
        // Loaded but tracking nothing (no rule uses it): a full table would
        // matter only once a firewall rule starts tracking connections.
        let tracking = count > 0;
        // One entry per connection, wherever its server runs.
        let needed = need.conns_per_dest.max(need.sockets / 2) + count;
        let fix = format!("sysctl -w net.netfilter.nf_conntrack_max={needed}");
        let at = push("net.netfilter.nf_conntrack_max", max, needed, tracking, !tracking, fix);
        if !tracking {
            conntrack_idle_at = Some(at);
        }
    }
    let pages = tcp_pages(need.sockets);
    let high = tcp_mem_high(pages, k);
    let tcp_fix = if high < pages {
        format!(
            "this machine has too little memory: the run needs about {} MiB of TCP memory, more than half of its {} MiB",
            (pages * 4096) >> 20,
            k.mem_total_bytes >> 20
        )
    } else {
        format!("sysctl -w net.ipv4.tcp_mem=\"{} {} {high}\"", high / 2, high * 3 / 4)
    };
    // Above its high mark the stack refuses socket memory: sends stall.
    // Unreadable inside a network namespace: the host's applies, unknown
    // here, so it is advice, not a block.
    let known = k.tcp_mem.is_some();
    let at = push("net.ipv4.tcp_mem (high, pages)", k.tcp_mem.map_or(0, |m| m[2]), pages, known, !known, tcp_fix);
    if !known {
        out[at].current = "unknown in this network namespace (the host's applies)".into();
    }
    if let Some((at, text)) = ports_at {
        out[at].current = text;
    }
    if let Some(at) = conntrack_idle_at {
        out[at].current += " (loaded, tracking nothing now)";
    }
    out.sort_by_key(|f| (!f.blocks, !f.advice));
    out
}

/// The findings as a table, with a verdict line.
pub fn render(findings: &[Finding]) -> String {
    let mut s = String::new();
    let width = findings.iter().map(|f| f.setting.len()).max().unwrap_or(0);
    for f in findings {
        let status = if f.blocks {
            "BLOCKS"
        } else if f.advice {
            "advice"
        } else {
            "ok"
        };
        let _ = write!(s, "  {:<width$}  {status:<6}  now {}, needs {}", f.setting, f.current, f.needed);
        if f.blocks || f.advice {
            let _ = write!(s, "\n  {:<width$}          fix: {}", "", f.fix);
        }
        s.push('\n');
    }
    s
}

/// Fails, naming every blocking setting and its fix, when the run cannot
/// succeed on this machine; prints advice otherwise.
pub fn require(what: &str, need: &Need) -> crate::CliResult<()> {
    let findings = check(need, &Kernel::read());
    let blocking = findings.iter().filter(|f| f.blocks).count();
    if blocking > 0 {
        bail!(
            "{what} cannot run on this machine as it is set up; {blocking} setting(s) stand in the way:\n{}\
             scripts/tune-kernel applies the sysctl fixes (as root, printing each value before and after).",
            render(&findings)
        );
    }
    if findings.iter().any(|f| f.advice) {
        eprintln!("{what}: the kernel allows this run; advice:\n{}", render(&findings));
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct LimitsArgs {
    /// Connections the run holds (each has two sockets here when the
    /// server runs on this machine too).
    #[arg(long, default_value_t = 1_000_000)]
    conns: u64,
    /// Processes each side (server, load) is spread over [default: as few
    /// as the descriptor limit allows]
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    procs: u64,
    /// The server runs on another machine: only the load's sockets are here.
    #[arg(long)]
    remote_server: bool,
    /// Source addresses the load spreads its connections over [default:
    /// one per 5,000 connections, as iomux load picks them on loopback]
    #[arg(long)]
    sources: Option<u64>,
    /// Print only `key=value` lines for the settings to change (what
    /// scripts/tune-kernel applies).
    #[arg(long)]
    sysctl: bool,
}

/// `iomux limits`: the table for a run of `--conns` connections.
pub fn run(args: LimitsArgs) -> crate::CliResult<std::process::ExitCode> {
    let k = Kernel::read();
    let usable = k.nofile_hard.saturating_sub(FDS_OVERHEAD).max(1);
    let procs = if args.procs == 0 { args.conns.div_ceil(usable).max(1) } else { args.procs };
    let sources = args.sources.unwrap_or_else(|| args.conns.div_ceil(CONNS_PER_SOURCE).max(1));
    let sockets = if args.remote_server { args.conns } else { 2 * args.conns };
    let need = Need {
        sockets,
        conns_per_dest: args.conns,
        sources,
        fds_per_process: args.conns.div_ceil(procs) + FDS_OVERHEAD,
        accept_burst: 4096,
    };
    let findings = check(&need, &k);
    if args.sysctl {
        for (key, value) in sysctl_values(&need, &k, &findings) {
            println!("{key}={value}");
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    println!(
        "{} connections ({} sockets on this machine), {procs} process(es) per side, {sources} source address(es):",
        args.conns, sockets
    );
    print!("{}", render(&findings));
    Ok(if findings.iter().any(|f| f.blocks) {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// The sysctl keys and values that lift every blocking or advised setting
/// a sysctl can lift.
fn sysctl_values(need: &Need, k: &Kernel, findings: &[Finding]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for f in findings.iter().filter(|f| f.blocks || f.advice) {
        match f.setting {
            "fs.file-max" => out.push(("fs.file-max", (need.sockets + FDS_OVERHEAD).to_string())),
            "fs.nr_open" => out.push(("fs.nr_open", need.fds_per_process.to_string())),
            "net.core.somaxconn" => out.push(("net.core.somaxconn", f.needed.clone())),
            "net.ipv4.tcp_max_syn_backlog" => out.push(("net.ipv4.tcp_max_syn_backlog", f.needed.clone())),
            "net.netfilter.nf_conntrack_max" => out.push(("net.netfilter.nf_conntrack_max", f.needed.clone())),
            "net.ipv4.tcp_mem (high, pages)" => {
                let high = tcp_mem_high(tcp_pages(need.sockets), k);
                out.push(("net.ipv4.tcp_mem", format!("{} {} {high}", high / 2, high * 3 / 4)));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Kernel {
        Kernel {
            file_max: 2_466_170,
            nr_open: 1_048_576,
            port_range: (32_768, 60_999),
            somaxconn: 4096,
            syn_backlog: 2048,
            conntrack: None,
            tcp_mem: Some([287_898, 383_867, 575_796]),
            nofile_hard: 20_000,
            mem_total_bytes: 24 << 30,
        }
    }

    fn blocking(f: &[Finding]) -> Vec<&'static str> {
        f.iter().filter(|f| f.blocks).map(|f| f.setting).collect()
    }

    #[test]
    fn a_million_in_enough_processes_over_enough_sources_needs_only_tcp_memory() {
        let need = Need {
            sockets: 2_000_000,
            conns_per_dest: 1_000_000,
            sources: 40,
            fds_per_process: 19_000,
            accept_burst: 4096,
        };
        let f = check(&need, &machine());
        assert_eq!(blocking(&f), ["net.ipv4.tcp_mem (high, pages)"]);
        assert!(f[0].fix.contains("tcp_mem=\"1000000 1500000 2000000\""), "{}", f[0].fix);
    }

    #[test]
    fn too_few_ports_and_too_many_descriptors_per_process_block() {
        let need =
            Need { sockets: 60_000, conns_per_dest: 30_000, sources: 1, fds_per_process: 30_064, accept_burst: 0 };
        let f = check(&need, &machine());
        assert_eq!(blocking(&f), ["RLIMIT_NOFILE (hard)", "net.ipv4.ip_local_port_range"]);
        let text = render(&f);
        assert!(text.contains("BLOCKS"), "{text}");
        assert!(text.contains("spread over 2 or more source addresses"), "{text}");
    }

    #[test]
    fn file_max_and_conntrack_block_with_their_sysctl() {
        let mut k = machine();
        k.file_max = 100_000;
        k.conntrack = Some((65_536, 10)); // tracking: count > 0
        let need =
            Need { sockets: 200_000, conns_per_dest: 100_000, sources: 4, fds_per_process: 10_000, accept_burst: 0 };
        let f = check(&need, &k);
        assert_eq!(blocking(&f), ["fs.file-max", "net.netfilter.nf_conntrack_max"]);
        assert!(f[0].fix.contains("sysctl -w fs.file-max=200064"), "{}", f[0].fix);
        let values = sysctl_values(&need, &k, &f);
        assert!(values.contains(&("net.netfilter.nf_conntrack_max", "100010".to_string())), "{values:?}");
    }

    #[test]
    fn a_small_backlog_is_advice_not_a_block() {
        let need =
            Need { sockets: 20_000, conns_per_dest: 10_000, sources: 1, fds_per_process: 10_064, accept_burst: 4096 };
        let f = check(&need, &machine());
        assert!(blocking(&f).is_empty());
        let syn = f.iter().find(|f| f.setting == "net.ipv4.tcp_max_syn_backlog").unwrap();
        assert!(syn.advice && syn.fix.contains("tcp_max_syn_backlog=4096"));
    }
}
