//! The documents' 100 Mbit/s LAN, emulated: netns.rs's pair of namespaces
//! with the link's rate (and its 0.1 ms, where netem exists) at both ends.
//! E2 and E3 run on it with `--network lan`, E8 under its `lan` profile.

use super::load_child::{LoadChild, Stderr};
use super::netns::{self, Net, Side};
use crate::lab::harness::trial::Measured;
use crate::load::LoadArgs;
use crate::CliResult;
use serde::{Deserialize, Serialize};

/// Where an experiment's cells run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// This machine's loopback.
    Loopback,
    /// The emulated LAN between two network namespaces (needs root).
    Lan,
}

crate::lab::harness::display_as_value!(Network);

/// `--network`, flattened into an experiment's flags.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct NetworkFlag {
    /// Networks, comma-separated: loopback, and lan (the emulated 100
    /// Mbit/s LAN of two network namespaces; needs root) [default:
    /// loopback; --full: both]
    #[arg(long, value_delimiter = ',')]
    pub network: Option<Vec<Network>>,
}

impl NetworkFlag {
    /// The networks asked for (else the settings'), the LAN's probed.
    pub fn plan(&self, full: bool) -> CliResult<Networks> {
        let networks = match &self.network {
            Some(n) => n.clone(),
            None if full => vec![Network::Loopback, Network::Lan],
            None => loopback_only(),
        };
        crate::lab::harness::no_repeats("--network", &networks)?;
        Ok(Networks { lan: networks.contains(&Network::Lan).then(probe), networks })
    }
}

/// Where an experiment's cells run: part of its params.
#[derive(Debug, Serialize, Deserialize)]
pub struct Networks {
    #[serde(default = "loopback_only")]
    pub networks: Vec<Network>,
    /// The LAN's emulation here (netem or not), or why it cannot be made;
    /// None when not asked for.
    #[serde(default)]
    pub lan: Option<Result<bool, String>>,
}

impl Networks {
    pub fn loopback(&self) -> bool {
        self.networks.contains(&Network::Loopback)
    }

    /// Asked for: its cells run, or say why they cannot.
    pub fn lan(&self) -> bool {
        self.lan.is_some()
    }
}

fn loopback_only() -> Vec<Network> {
    vec![Network::Loopback]
}

/// The qdisc at each end of the link: netem's rate and delay, or without
/// netem tbf's rate alone.
pub fn qdisc(netem: bool) -> &'static str {
    if netem {
        "netem delay 50us rate 100mbit"
    } else {
        "tbf rate 100mbit burst 32kb latency 20ms"
    }
}

/// How the link is made here, and what that leaves out, for a page.
pub fn mechanism(netem: bool) -> (String, Option<String>) {
    if netem {
        ("netem (rate, delay), both ends".into(), None)
    } else {
        (
            "tc tbf 100 Mbit/s, both ends".into(),
            Some("rate only: the 0.1 ms delay is not emulated (no netem; veth adds about 0.02 ms)".into()),
        )
    }
}

/// Whether the LAN can be made here: with netem or not; Err says why not.
pub fn probe() -> Result<bool, String> {
    netns::probe().map(|e| e.netem)
}

/// The namespaces with the LAN's link up.
pub fn up(netem: bool) -> CliResult<Net> {
    let net = Net::create()?;
    for side in [Side::Server, Side::Client] {
        net.set_faults(side, Some(qdisc(netem)), None, None)?;
    }
    Ok(net)
}

/// An experiment's LAN as planned (`Some(Ok(netem))`, `Some(Err(why not))`,
/// or None when not asked for), made at its first cell and kept.
pub struct OnDemand<'a> {
    planned: &'a Option<Result<bool, String>>,
    /// Made, or why it could not be (said by every LAN cell after).
    net: Option<Result<Net, String>>,
}

impl<'a> OnDemand<'a> {
    pub fn new(planned: &'a Option<Result<bool, String>>) -> OnDemand<'a> {
        OnDemand { planned, net: None }
    }

    /// Runs `cell` on the LAN, or says why it cannot be run there.
    pub fn run<S>(&mut self, cell: impl FnOnce(&Net) -> CliResult<S>) -> Measured<S> {
        let netem = match self.planned {
            Some(Ok(netem)) => *netem,
            Some(Err(why)) => return Ok(Err(format!("the LAN: {why}"))),
            None => return Ok(Err("the LAN was not planned".into())),
        };
        let net = self
            .net
            .get_or_insert_with(|| up(netem).map_err(|e| format!("the LAN could not be made: {}", crate::one_line(e))));
        match net {
            Ok(net) => cell(net).map(Ok),
            Err(why) => Ok(Err(why.clone())),
        }
    }
}

/// A page's paragraph on the LAN cells as planned: `who` ran in the
/// client's namespace, `how` they ran; None when not asked for.
pub fn intro(planned: &Option<Result<bool, String>>, who: &str, how: &str) -> Option<String> {
    match planned {
        Some(Ok(netem)) => {
            let (made, caveat) = mechanism(*netem);
            let caveat = caveat.map_or(String::new(), |c| format!("; {c}"));
            Some(format!(
                "On the LAN (--network lan): the server and {who} in two network namespaces joined by a 100 Mbit/s \
                 link ({made}{caveat}), {how}."
            ))
        }
        Some(Err(why)) => Some(format!("Not run on the LAN: {why}.")),
        None => None,
    }
}

/// `iomux load` with `args` in the client's namespace.
pub fn load(net: &Net, args: &LoadArgs) -> CliResult<LoadChild> {
    LoadChild::start(args, |exe| net.command(Side::Client, exe), " in the client's namespace", Stderr::Kept)
}

/// `iomux serve`'s flags in a LAN cell: pinned where the lab pins servers.
pub fn server_flags() -> Vec<String> {
    match super::cell::cpus() {
        (Some(cpu), _) => vec!["--cpu".into(), cpu.to_string()],
        _ => Vec::new(),
    }
}
