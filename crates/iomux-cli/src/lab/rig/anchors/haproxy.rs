//! haproxy as E9's reference proxy: tcp mode, one thread, its own
//! configuration in a folder of its own, pinned to the server CPU, stopped
//! and reaped whatever happens (a value owns it; dropping it kills it).

use crate::CliResult;
use anyhow::{anyhow, bail, Context as _};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The configuration: tcp mode, `nbthread 1`, room for `maxconn`
/// connections each way, and with `splice`, splicing where haproxy finds
/// it pays (`option splice-auto`: its own best setting for bulk
/// transfers; its pipes take half a descriptor per connection more, so
/// the most connections one process holds go without). Timeouts long
/// enough never to end a measured connection.
pub fn config(listen: SocketAddr, upstream: SocketAddr, maxconn: usize, splice: bool) -> String {
    let splice = if splice { "\x20 option splice-auto\n" } else { "" };
    format!(
        "# Written by iomux bench proxy.\n\
         global\n\
         \x20 nbthread 1\n\
         \x20 maxconn {maxconn}\n\
         defaults\n\
         \x20 mode tcp\n\
         {splice}\
         \x20 timeout connect 5s\n\
         \x20 timeout client 300s\n\
         \x20 timeout server 300s\n\
         frontend fe\n\
         \x20 bind {listen}\n\
         \x20 default_backend be\n\
         backend be\n\
         \x20 server up {upstream}\n"
    )
}

pub struct Haproxy {
    child: Child,
    pub addr: SocketAddr,
    /// Its configuration and log, removed with it.
    dir: crate::os::PrivateDir,
}

impl Haproxy {
    /// Starts `program` on a free loopback port relaying to `upstream`,
    /// pinned to `cpu`, and waits until it accepts connections.
    pub fn start(
        program: &Path,
        upstream: SocketAddr,
        maxconn: usize,
        splice: bool,
        cpu: Option<usize>,
    ) -> CliResult<Haproxy> {
        use std::os::unix::process::CommandExt;
        let dir = crate::os::PrivateDir::new("iomux-haproxy", "haproxy's configuration")?;
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port for haproxy")?;
        let conf = dir.path().join("haproxy.cfg");
        std::fs::write(&conf, config(addr, upstream, maxconn, splice))
            .with_context(|| format!("writing {}", conf.display()))?;
        let log = std::fs::File::create(dir.path().join("haproxy.log")).context("haproxy's log")?;
        let mut cmd = Command::new(program);
        // -db: foreground, no daemon; -f: this configuration only.
        cmd.arg("-db").arg("-f").arg(&conf).stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        if let Some(cpu) = cpu {
            // SAFETY: sched_setaffinity is async-signal-safe and touches no
            // state of the parent's.
            unsafe {
                cmd.pre_exec(move || crate::os::pin_to_cpu(cpu));
            }
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {}", program.display()))?;
        let mut haproxy = Haproxy { child, addr, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = haproxy.child.try_wait() {
                bail!("haproxy exited at start with {status}: {}", haproxy.said());
            }
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(haproxy);
            }
            if Instant::now() > deadline {
                bail!("haproxy does not accept on {addr} within 10 s: {}", haproxy.said());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last thing haproxy said on stderr.
    fn said(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default();
        text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("nothing on stderr").to_string()
    }

    /// SIGTERM (haproxy's hard stop), then SIGKILL after 5 s.
    pub fn stop(mut self) -> CliResult<()> {
        if crate::os::signal_and_wait(&mut self.child, rustix::process::Signal::TERM, Duration::from_secs(5)) {
            return Ok(());
        }
        Err(anyhow!("haproxy did not stop within 5 s of SIGTERM; killed. {}", self.said()))
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_relays_in_tcp_mode_on_one_thread() {
        let c = config("127.0.0.1:8000".parse().unwrap(), "127.0.0.1:9000".parse().unwrap(), 9900, true);
        for line in ["nbthread 1", "maxconn 9900", "mode tcp", "option splice-auto", "bind 127.0.0.1:8000"] {
            assert!(c.contains(line), "{line}: {c}");
        }
        assert!(c.contains("server up 127.0.0.1:9000"), "{c}");
        let plain = config("127.0.0.1:8000".parse().unwrap(), "127.0.0.1:9000".parse().unwrap(), 10, false);
        assert!(!plain.contains("splice") && plain.contains("mode tcp"), "{plain}");
    }
}
