//! The programs the lab drives but did not write (wrk, h2load and nginx
//! for E6; Chromium for report.png), and bringing them: when one is
//! missing and this machine can install packages (root, apt-get), `iomux
//! bench` runs the project's install script, printing the command first;
//! otherwise it says exactly what to run. The scripts are compiled in, so
//! the binary brings them wherever it is run from.

use crate::lab::rig::anchors::clients::Tool;
use std::path::Path;
use std::process::{Command, Stdio};

/// Packages installed by one script.
pub struct Kit {
    /// The programs it brings, as an experiment's `Entry::needs` names them.
    pub tools: &'static [&'static str],
    /// What they are for, in the message.
    pub for_what: &'static str,
    /// The script's path in the repository, for the message.
    pub script: &'static str,
    text: &'static str,
}

pub const HTTP: Kit = Kit {
    tools: &["wrk", "h2load", "nginx", "redis-server", "redis-benchmark", "haproxy"],
    for_what: "E6 (bench http), E7 (bench resp) and E9 (bench proxy)",
    script: "scripts/install-http-tools",
    text: include_str!("../../../../../scripts/install-http-tools"),
};

pub const CHROMIUM: Kit = Kit {
    tools: &["chromium"],
    for_what: "report.png (the report drawn by a browser)",
    script: "scripts/install-chromium",
    text: include_str!("../../../../../scripts/install-chromium"),
};

pub const NET: Kit = Kit {
    tools: &["nft", "tc", "ip", "iptables"],
    for_what: "E8 (bench faults) and E2, E3 with --network lan",
    script: "scripts/install-net-tools",
    text: include_str!("../../../../../scripts/install-net-tools"),
};

const KITS: [&Kit; 3] = [&HTTP, &CHROMIUM, &NET];

/// What this machine allows.
#[derive(Clone, Copy, Debug)]
pub struct Machine {
    pub root: bool,
    pub apt: bool,
}

impl Machine {
    pub fn this() -> Machine {
        Machine { root: rustix::process::geteuid().is_root(), apt: Path::new("/usr/bin/apt-get").exists() }
    }
}

/// What to do about one kit.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Everything it brings is here.
    Present,
    /// Run its script now.
    Install,
    /// Tell the user this, and go on without.
    Advise(String),
}

/// The decision for `kit`, given what is `missing` of it (pure, so the
/// rules are tested without a package manager).
pub fn decide(kit: &Kit, missing: &[&str], machine: Machine, install_allowed: bool) -> Plan {
    if missing.is_empty() {
        return Plan::Present;
    }
    let what = format!("{} not installed, needed for {}", missing.join(", "), kit.for_what);
    if !install_allowed {
        return Plan::Advise(format!("{what}; --no-install given, so run: sudo bash {}", kit.script));
    }
    if !machine.apt {
        return Plan::Advise(format!(
            "{what}; this machine has no apt-get: install them with its package manager ({} lists Debian's packages)",
            kit.script
        ));
    }
    if !machine.root {
        return Plan::Advise(format!("{what}; installing needs root: run sudo bash {}", kit.script));
    }
    Plan::Install
}

/// Whether a program the lab needs is here.
fn present(tool: &str) -> bool {
    match tool {
        "wrk" => Tool::Wrk.find().is_ok(),
        "h2load" => Tool::H2load.find().is_ok(),
        "nginx" => Tool::Nginx.find().is_ok(),
        "redis-server" => Tool::RedisServer.find().is_ok(),
        "redis-benchmark" => Tool::RedisBenchmark.find().is_ok(),
        "haproxy" => Tool::Haproxy.find().is_ok(),
        "chromium" => crate::lab::rig::browser::chromium_path().is_file(),
        t if NET.tools.contains(&t) => crate::lab::rig::netns::tool_present(t),
        other => unreachable!("no kit brings {other}"),
    }
}

/// Makes sure the tools that `needs` names are here: installs what is
/// missing where allowed, else prints what to run. Never fails the run:
/// an experiment whose tool is still missing says so in its results.
pub fn bring(needs: &[&str], install_allowed: bool) {
    let machine = Machine::this();
    for kit in KITS {
        let missing: Vec<&str> = kit.tools.iter().copied().filter(|t| needs.contains(t) && !present(t)).collect();
        match decide(kit, &missing, machine, install_allowed) {
            Plan::Present => {}
            Plan::Advise(text) => eprintln!("iomux bench: {text}"),
            Plan::Install => install(kit, &missing),
        }
    }
}

fn install(kit: &Kit, missing: &[&str]) {
    eprintln!(
        "iomux bench: {} missing, needed for {}; installing with Debian's packages: bash {} (--no-install turns this off)",
        missing.join(", "),
        kit.for_what,
        kit.script
    );
    // The script's own output goes to stderr: stdout carries the results.
    let status = Command::new("bash")
        .arg("-c")
        .arg(kit.text)
        .arg(kit.script)
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status();
    match status {
        Ok(s) if s.success() => eprintln!("iomux bench: {} installed", missing.join(", ")),
        Ok(s) => eprintln!("iomux bench: {} failed ({s}); going on without {}", kit.script, missing.join(", ")),
        Err(e) => eprintln!("iomux bench: could not start bash for {}: {e}; going on without", kit.script),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT_APT: Machine = Machine { root: true, apt: true };

    #[test]
    fn installs_only_what_is_missing_and_allowed() {
        assert_eq!(decide(&HTTP, &[], ROOT_APT, true), Plan::Present);
        assert_eq!(decide(&HTTP, &["wrk"], ROOT_APT, true), Plan::Install);
        assert_eq!(decide(&HTTP, &[], Machine { root: false, apt: false }, false), Plan::Present);
    }

    #[test]
    fn says_what_to_run_when_it_may_not_install() {
        let Plan::Advise(off) = decide(&HTTP, &["wrk", "nginx"], ROOT_APT, false) else { panic!("advice expected") };
        assert!(off.contains("wrk, nginx not installed") && off.contains("--no-install"), "{off}");
        assert!(off.contains("sudo bash scripts/install-http-tools"), "{off}");

        let Plan::Advise(user) = decide(&CHROMIUM, &["chromium"], Machine { root: false, apt: true }, true) else {
            panic!("advice expected")
        };
        assert!(user.contains("needs root") && user.contains("sudo bash scripts/install-chromium"), "{user}");

        let Plan::Advise(no_apt) = decide(&HTTP, &["h2load"], Machine { root: true, apt: false }, true) else {
            panic!("advice expected")
        };
        assert!(no_apt.contains("no apt-get"), "{no_apt}");
    }

    #[test]
    fn every_needed_tool_has_a_kit_and_a_script() {
        for entry in crate::lab::registry::ENTRIES {
            for tool in entry.needs {
                assert!(KITS.iter().any(|k| k.tools.contains(tool)), "{}: no kit brings {tool}", entry.name);
            }
        }
        for kit in KITS {
            assert!(kit.text.starts_with("#!/usr/bin/env bash"), "{} is compiled in", kit.script);
        }
    }
}
