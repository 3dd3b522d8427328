//! A network of the lab's own for E8 (and E2, E3 on the LAN): two network namespaces, the server's
//! and the client's, joined by a veth pair, with faults set inside them by
//! `tc` (rate), `nft` (loss, duplication, resets, a vanished peer) and
//! `iomux netq` behind iptables' NFQUEUE (delay, reordering).
//! Nothing outside the two namespaces changes. They are removed when the
//! [`Net`] is dropped, on SIGINT or SIGTERM (a handler removes every one
//! still registered, then exits), and, when a run was killed outright, by
//! the next run, which removes those whose process is gone.

use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::Mutex;

pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
pub const SERVER_DEV: &str = "iomux-s";
pub const CLIENT_DEV: &str = "iomux-c";
const PREFIX: &str = "iomux-e8-";

/// Which end of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// Namespaces this process made and has not removed yet.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Set (under LIVE's lock) when a signal ends the run: no namespace is
/// made after the handler took the list.
static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub struct Net {
    server: String,
    client: String,
    /// `iomux netq` of each side while a profile delays packets.
    delay_lines: Mutex<Vec<(Side, std::process::Child)>>,
}

/// A profile's delay line: `iomux netq` with these arguments in each
/// namespace, fed every TCP packet at the namespace's input.
pub type Delay = crate::lab::rig::netq::NetqArgs;

/// Runs `cmd`, failing with what it printed.
fn run(cmd: &mut Command, stdin: Option<&str>) -> CliResult<()> {
    use std::io::Write;
    let shown = format!("{cmd:?}").replace('"', "");
    let mut child = cmd
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| shown.clone())?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).with_context(|| format!("{shown}: writing its input"))?;
    }
    let out = child.wait_with_output().with_context(|| shown.clone())?;
    match out.status.success() {
        true => Ok(()),
        false => Err(anyhow!("{shown} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim())),
    }
}

/// Kills what runs in namespace `name`, then removes it (a name whose
/// processes still run would only lose its name).
fn remove(name: &str) {
    for pid in pids(name) {
        // SAFETY: kill(2) with a pid read from the kernel's list; no memory involved.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).status();
}

/// The processes in namespace `name`.
fn pids(name: &str) -> Vec<i32> {
    Command::new("ip").args(["netns", "pids", name]).stderr(Stdio::null()).output().map_or(Vec::new(), |out| {
        String::from_utf8_lossy(&out.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
    })
}

/// Removes every namespace still registered and returns their names;
/// none is made after this (the lab's SIGINT/SIGTERM handling,
/// rig/interrupt.rs).
pub fn remove_live() -> Vec<String> {
    let names = LIVE
        .lock()
        .map(|l| {
            STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
            l.clone()
        })
        .unwrap_or_default();
    for name in &names {
        remove(name);
    }
    names
}

/// Removes namespaces of earlier runs whose process is gone.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else { continue };
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("iomux bench: removing network namespace {name}, left by a run that was killed");
            remove(name);
        }
    }
}

pub fn tool_present(tool: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().any(|d| std::path::Path::new(d).join(tool).exists())
}

/// The fault emulators this kernel offers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Emulators {
    /// netem (`tc` says "Specified qdisc kind is unknown" without it).
    pub netem: bool,
    /// iptables' NFQUEUE target (the delay line's feed).
    pub nfqueue: bool,
}

/// Whether this machine can make the network, and with which emulators,
/// tried on the loopback of one throwaway namespace. Err says why not:
/// not root, `ip`, `tc` or `nft` missing, or no namespaces (root without
/// CAP_SYS_ADMIN, in a container).
pub fn probe() -> Result<Emulators, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("needs root (network namespaces, tc and nft)".into());
    }
    let missing: Vec<&str> = ["ip", "tc", "nft"].into_iter().filter(|t| !tool_present(t)).collect();
    if !missing.is_empty() {
        return Err(format!("{} not installed (scripts/install-net-tools brings them)", missing.join(", ")));
    }
    let name = format!("{PREFIX}{}-probe", std::process::id());
    if let Err(e) = run(Command::new("ip").args(["netns", "add", &name]), None) {
        remove(&name);
        return Err(format!("cannot make a network namespace here: {}", crate::one_line(e)));
    }
    let works = |program: &str, args: &[&str]| {
        run(Command::new("ip").args(["netns", "exec", &name, program]).args(args), None).is_ok()
    };
    let found = Emulators {
        netem: works("tc", &["qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]),
        nfqueue: works("iptables", &["-A", "INPUT", "-j", "NFQUEUE"]),
    };
    remove(&name);
    Ok(found)
}

impl Net {
    /// Makes the two namespaces and the link between them: 10.77.0.1
    /// (server) and 10.77.0.2 (client), each segment the size of a wire
    /// packet (gso_max_segs 1), so that "1% of packets" means packets, not
    /// 64 KB offload bursts.
    pub fn create() -> CliResult<Net> {
        remove_stale();
        super::interrupt::install();
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let (pid, k) = (std::process::id(), MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let net = Net {
            server: format!("{PREFIX}{pid}-{k}-s"),
            client: format!("{PREFIX}{pid}-{k}-c"),
            delay_lines: Mutex::new(Vec::new()),
        };
        for name in [&net.server, &net.client] {
            let mut live = LIVE.lock().map_err(|_| anyhow!("namespace list poisoned"))?;
            if STOPPING.load(std::sync::atomic::Ordering::SeqCst) {
                bail!("stopping");
            }
            run(Command::new("ip").args(["netns", "add", name]), None)?;
            live.push(name.clone());
        }
        let (s, c) = (net.server.as_str(), net.client.as_str());
        let steps: [&[&str]; 9] = [
            &["-n", s, "link", "add", SERVER_DEV, "type", "veth", "peer", "name", CLIENT_DEV, "netns", c],
            &["-n", s, "addr", "add", "10.77.0.1/24", "dev", SERVER_DEV],
            &["-n", c, "addr", "add", "10.77.0.2/24", "dev", CLIENT_DEV],
            &["-n", s, "link", "set", "dev", SERVER_DEV, "gso_max_segs", "1"],
            &["-n", c, "link", "set", "dev", CLIENT_DEV, "gso_max_segs", "1"],
            &["-n", s, "link", "set", "lo", "up"],
            &["-n", c, "link", "set", "lo", "up"],
            &["-n", s, "link", "set", SERVER_DEV, "up"],
            &["-n", c, "link", "set", CLIENT_DEV, "up"],
        ];
        for args in steps {
            run(Command::new("ip").args(args), None)?;
        }
        Ok(net)
    }

    fn name(&self, side: Side) -> &str {
        match side {
            Side::Server => &self.server,
            Side::Client => &self.client,
        }
    }

    /// `program args` run inside `side`'s namespace. It dies with the
    /// bench (PR_SET_PDEATHSIG survives `ip netns exec`'s exec): never a
    /// server or load left running in a namespace nobody can name.
    pub fn command(&self, side: Side, program: &std::ffi::OsStr) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.name(side)]).arg(program);
        // SAFETY: the closure runs in the child between fork and exec and
        // makes one async-signal-safe call (prctl).
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                    .map_err(std::io::Error::from)
            });
        }
        cmd
    }

    /// Replaces `side`'s faults: the qdisc of its end of the link (`tc`
    /// arguments after `qdisc replace dev DEV root`, or the default), its
    /// nftables ruleset (`nft -f` text, or none) and its delay line (or
    /// none: a running one is stopped).
    pub fn set_faults(
        &self,
        side: Side,
        qdisc: Option<&str>,
        rules: Option<&str>,
        delay: Option<&Delay>,
    ) -> CliResult<()> {
        let ns = self.name(side);
        let dev = match side {
            Side::Server => SERVER_DEV,
            Side::Client => CLIENT_DEV,
        };
        match qdisc {
            Some(q) => run(
                Command::new("tc").args(["-n", ns, "qdisc", "replace", "dev", dev, "root"]).args(q.split_whitespace()),
                None,
            )?,
            // Deleting the default root qdisc fails: nothing to remove.
            None => {
                let _ = Command::new("tc")
                    .args(["-n", ns, "qdisc", "del", "dev", dev, "root"])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        // Also removes iptables' rules (iptables-nft keeps them in nftables).
        run(Command::new("ip").args(["netns", "exec", ns, "nft", "flush", "ruleset"]), None)?;
        if let Some(text) = rules {
            run(Command::new("ip").args(["netns", "exec", ns, "nft", "-f", "-"]), Some(text))?;
        }
        self.stop_delay_line(side);
        if let Some(delay) = delay {
            self.start_delay_line(side, delay)?;
        }
        Ok(())
    }

    /// Starts `iomux netq` in `side`'s namespace, waits until it has bound
    /// its queue, then sends the namespace's incoming TCP through it
    /// (iptables' NFQUEUE target: this kernel's nftables has no `queue`).
    fn start_delay_line(&self, side: Side, delay: &Delay) -> CliResult<()> {
        use std::io::BufRead;
        let exe = std::env::current_exe().context("cannot find the iomux executable")?;
        let mut child = self
            .command(side, exe.as_os_str())
            .arg("netq")
            .args(delay.to_cli())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Its one line on failure goes to the bench's own stderr.
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting iomux netq in {}", self.name(side)))?;
        let mut said = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = std::io::BufReader::new(out).read_line(&mut said);
        }
        if !said.starts_with("netq: bound queue") {
            let _ = child.kill();
            let status = child.wait().with_context(|| format!("iomux netq in {}", self.name(side)))?;
            bail!("iomux netq in {} did not bind its queue ({status}; its error above)", self.name(side));
        }
        self.delay_lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((side, child));
        // Without --queue-bypass: a delay line that died drops the packets,
        // and the cell shows it, instead of passing them undelayed.
        let queue = delay.queue.to_string();
        let rule = ["-A", "INPUT", "-p", "tcp", "-j", "NFQUEUE", "--queue-num", &queue];
        run(Command::new("ip").args(["netns", "exec", self.name(side), "iptables"]).args(rule), None)
    }

    /// Stops `side`'s delay line, if one runs (its rule is gone already:
    /// held packets are dropped with the queue, as a link's would be).
    fn stop_delay_line(&self, side: Side) {
        let mut lines = self.delay_lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.retain_mut(|(of, child)| {
            if *of == side {
                let _ = child.kill();
                let _ = child.wait();
            }
            *of != side
        });
    }

    /// The kernel's count of retransmitted TCP segments in `side`'s
    /// namespace (RetransSegs, /proc/net/snmp).
    pub fn retransmits(&self, side: Side) -> CliResult<u64> {
        let out = Command::new("ip")
            .args(["netns", "exec", self.name(side), "cat", "/proc/net/snmp"])
            .output()
            .with_context(|| format!("reading /proc/net/snmp in {}", self.name(side)))?;
        crate::os::counter(&String::from_utf8_lossy(&out.stdout), "Tcp:", "RetransSegs")
            .ok_or_else(|| anyhow!("no Tcp RetransSegs in /proc/net/snmp of {}", self.name(side)))
    }
}

impl Net {
    /// An error if a delay line has died (its queue then drops every
    /// packet: no --queue-bypass).
    pub fn check_delay_lines(&self) -> CliResult<()> {
        for (side, child) in self.delay_lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                bail!("iomux netq in {} died mid-cell ({status}; its error above)", self.name(*side));
            }
        }
        Ok(())
    }

    /// Packets the delay lines' queues dropped, both namespaces: the
    /// kernel's (queue full) and the user side's (netq too slow), from
    /// /proc/net/netfilter/nfnetlink_queue as each netq sees it (`ip
    /// netns exec` became netq, in its namespace); 0 without a delay line.
    pub fn delay_line_drops(&self) -> CliResult<u64> {
        let mut drops = 0;
        for (side, child) in self.delay_lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
            let path = format!("/proc/{}/net/netfilter/nfnetlink_queue", child.id());
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading nfnetlink_queue in {} ({path})", self.name(*side)))?;
            // queue, portid, waiting, copy mode, copy range, queue_dropped, user_dropped, ...
            for row in text.lines() {
                let fields: Vec<u64> = row.split_whitespace().filter_map(|f| f.parse().ok()).collect();
                drops += fields.get(5).copied().unwrap_or(0) + fields.get(6).copied().unwrap_or(0);
            }
        }
        Ok(drops)
    }

    /// Bytes `side`'s end of the link has received (frames, headers
    /// included): the kernel's counter of the veth device.
    pub fn rx_bytes(&self, side: Side) -> CliResult<u64> {
        let dev = match side {
            Side::Server => SERVER_DEV,
            Side::Client => CLIENT_DEV,
        };
        let path = format!("/sys/class/net/{dev}/statistics/rx_bytes");
        // /sys shows the devices of the namespace it was mounted in: read
        // it from a process inside.
        let out = Command::new("ip")
            .args(["netns", "exec", self.name(side), "cat", &path])
            .output()
            .with_context(|| format!("reading {path} in {}", self.name(side)))?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim().parse().map_err(|_| anyhow!("{path} in {}: not a number: {text:?}", self.name(side)))
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.stop_delay_line(Side::Server);
        self.stop_delay_line(Side::Client);
        for name in [&self.server, &self.client] {
            remove(name);
        }
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|n| n != &self.server && n != &self.client);
        }
    }
}
