//! The one list of experiments. It makes the `iomux bench` subcommands,
//! the default run and its order, the report's order and labels, and CI's
//! smoke run: adding an experiment is its file and one line here.

use crate::lab::harness::claim::Claim;
use crate::lab::harness::envelope::{self, Envelope, Figure, NoiseSummary, SCHEMA};
use crate::lab::harness::experiment::{figures, say_how_to_decide, Entry};
use crate::lab::harness::trial::Trial;
use crate::lab::render::{self, view::Shown, view::View};
use crate::lab::rig::noise::NetworkIsOwn;
use crate::lab::{Outcome, Settings};
use crate::CliResult;
use std::time::Instant;

/// What the registry needs of an experiment; every [`Experiment`] has it.
pub trait Registered {
    type Args: clap::Args + Default + std::fmt::Debug;
    const ENTRY: Entry;
    /// Checks the flags and the machine before anything runs.
    fn check(args: &Self::Args, settings: &Settings) -> CliResult<()>;
    fn run(args: &Self::Args, settings: &Settings) -> CliResult<Outcome>;
    /// Its page and figures from its JSON, the figures derived again from
    /// the takes by this version (results written before a figure's field
    /// existed get it); None for results this version cannot draw (written
    /// as schema 1).
    fn read_json(text: &str) -> CliResult<Option<(View, Vec<Figure>)>>;
}

impl<E: Shown> Registered for E
where
    E::Args: clap::Args + std::fmt::Debug,
{
    type Args = E::Args;
    const ENTRY: Entry = E::ENTRY;
    fn check(args: &E::Args, settings: &Settings) -> CliResult<()> {
        E::plan(args, settings).map(drop)
    }
    fn run(args: &E::Args, settings: &Settings) -> CliResult<Outcome> {
        execute::<E>(args, settings)
    }
    fn read_json(text: &str) -> CliResult<Option<(View, Vec<Figure>)>> {
        let env: Envelope<E::Params, E::Arm, E::Sample> = serde_json::from_str(text)?;
        Ok(Some((E::view(&env)?, figures::<E>(&env))))
    }
}

/// Runs `E` from its flags: plan, measure, judge, write JSON, Markdown and
/// SVG, print the Markdown.
pub fn execute<E: Shown>(args: &E::Args, settings: &Settings) -> CliResult<Outcome> {
    let params = E::plan(args, settings)?;
    let started = Instant::now();
    let specs = E::claims(&params);
    let network_is_own = NetworkIsOwn(&settings.noise);
    let rounds = E::rounds(&params);
    let mut trial = Trial::new(&settings.noise, E::ENTRY.name, std::time::Duration::from_secs_f64(rounds.budget_s));
    trial.count_network_as_own(&network_is_own, E::network_is_own);
    trial.placement_free(E::placement_free);
    if rounds.as_needed {
        trial.budget_as_needed();
    }
    let mut measure = E::rig(&params, &mut trial, settings)?;
    for round in 0..rounds.first_rounds {
        let arms = E::first_arms(&params, round, &trial);
        trial.round(&arms, &mut *measure)?;
    }
    trial.until_decided(&specs, &mut *measure)?;
    drop(measure);
    let mut claims: Vec<Claim> = specs.iter().map(|s| trial.judge(s)).collect();
    let rounds = trial.rounds();
    let (waited, swamped, measured) = (trial.waited(), trial.swamped(), started.elapsed());
    let pace = (measured.saturating_sub(waited)).as_secs_f64() / rounds.max(1) as f64;
    for claim in &mut claims {
        say_how_to_decide::<E::Args>(claim, E::ENTRY.name, pace);
    }
    eprintln!(
        "{}: measured in {:.0} s ({} rounds; {:.0} s of it waiting for the CPUs to be placed close)",
        E::ENTRY.name,
        measured.as_secs_f64(),
        rounds,
        waited.as_secs_f64()
    );
    let (takes, unmeasurable) = trial.finish();
    let mut env = Envelope {
        experiment: E::ENTRY.name.into(),
        schema: SCHEMA,
        full: settings.full,
        commit: env!("IOMUX_COMMIT").into(),
        machine: settings.machine.clone(),
        params,
        published: E::PUBLISHED.into(),
        claims,
        figures: Vec::new(),
        noise: NoiseSummary {
            waited_s: waited.as_secs_f64(),
            measured_s: measured.as_secs_f64(),
            swamped,
            ..NoiseSummary::of(rounds, &takes, settings.noise.since(started))
        },
        takes,
        unmeasurable,
    };
    env.figures = figures::<E>(&env);
    let view = E::view(&env)?;
    let markdown = render::markdown::page(&E::ENTRY, &env.machine, &env.published, &view, &env.claims, &env.noise);
    println!("{markdown}");
    let mut files = vec![envelope::write(&settings.out_dir, &env)?];
    files.extend(render::write_page(&settings.out_dir, E::ENTRY.name, &markdown, view.svg.as_deref())?);
    Ok(Outcome { name: E::ENTRY.name, files })
}

macro_rules! registry {
    ($( $(#[$doc:meta])* $variant:ident => $ty:ty ),* $(,)?) => {
        /// An experiment and its flags.
        #[derive(clap::Subcommand, Debug)]
        pub enum Which {
            $( $(#[$doc])* $variant(<$ty as Registered>::Args), )*
        }

        /// Every experiment, in the order the bench runs and the report shows them.
        pub const ENTRIES: &[Entry] = &[ $( <$ty as Registered>::ENTRY, )* ];

        /// Each experiment's page and figures from its JSON.
        #[allow(clippy::type_complexity)]
        const READERS: &[(&str, fn(&str) -> CliResult<Option<(View, Vec<Figure>)>>)] =
            &[ $( (<$ty as Registered>::ENTRY.name, <$ty as Registered>::read_json), )* ];

        impl Which {
            /// Every experiment with its default flags.
            pub fn all() -> Vec<Which> {
                vec![ $( Which::$variant(Default::default()), )* ]
            }
            pub fn entry(&self) -> &'static Entry {
                match self { $( Which::$variant(_) => &<$ty as Registered>::ENTRY, )* }
            }
            pub fn check(&self, settings: &Settings) -> CliResult<()> {
                match self { $( Which::$variant(a) => <$ty as Registered>::check(a, settings), )* }
            }
            pub fn run(&self, settings: &Settings) -> CliResult<Outcome> {
                match self { $( Which::$variant(a) => <$ty as Registered>::run(a, settings), )* }
            }
        }
    };
}

registry! {
    /// E1: empty poll()/epoll_wait()/select()/io_uring waits per second
    /// against the number of registered fds (the book's poll-vs-epoll.c).
    SyscallRate => crate::lab::experiments::syscall_rate::SyscallRate,
    /// E2: 40,000 round trips by 10 active connections among Z idle ones,
    /// on every backend (the epoll article's poll-vs-epoll test).
    Idle => crate::lab::experiments::idle::Idle,
    /// E3: 40 senders of 100-byte messages, a server that only reads: CPU
    /// and syscalls per byte.
    Sink => crate::lab::experiments::sink::Sink,
    /// E4: many connections echoing 100-byte messages: server syscalls per
    /// echo, throughput, latency, memory per connection.
    Echo => crate::lab::experiments::echo::Echo,
    /// E5: iomux's servers beside tokio, monoio, compio and a plain C
    /// epoll server, one thread on one CPU each: echoes/s, server CPU per
    /// echo, latency, syscalls, memory, under closed and open loops.
    Peers => crate::lab::experiments::peers::Peers,
    /// io_uring's optional features, each off and on: server CPU and
    /// syscalls per echo, E3 loopback CPU per GB.
    UringFeatures => crate::lab::experiments::uring_features::UringFeatures,
    /// E6: `iomux serve --proto http` on each backend beside nginx,
    /// measured by wrk and h2load (with and without pipelining):
    /// requests/s, server CPU per request, latency, errors.
    Http => crate::lab::experiments::http::Http,
    /// E7: `iomux serve --proto resp` on each backend beside
    /// redis-server, measured by redis-benchmark (SET, GET, INCR, with and
    /// without pipelining), open and in the same CPU quota: requests/s,
    /// server CPU per request, latency, errors.
    Resp => crate::lab::experiments::resp::Resp,
    /// E8: echo over a faulty network in two network namespaces of the
    /// run's own (loss, duplication, resets, a 100 Mbit/s link, vanished
    /// clients and servers), on each backend: every byte checked, latency,
    /// retransmits, errors by name, connections reclaimed. Needs root.
    Faults => crate::lab::experiments::faults::Faults,
    /// E9: `iomux serve --proto proxy` on each backend beside haproxy
    /// and the C floor of a relay, every proxy in the same CPU quota:
    /// requests/s and CPU per request by wrk to nginx, CPU per GB of
    /// bulk, RSS per idle proxied connection.
    Proxy => crate::lab::experiments::proxy::ProxyBench,
    /// E7 pub/sub: `iomux serve --proto resp`'s pub/sub beside
    /// redis-server's, driven by `iomux load --mode pubsub`, in the same
    /// CPU quota: messages delivered/s to 20 subscribers, a subscriber that
    /// never reads dropped, peak RSS.
    Pubsub => crate::lab::experiments::pubsub::Pubsub,
}

/// The view and figures of the experiment named `name` from its JSON text.
pub fn read_json(name: &str, text: &str) -> CliResult<Option<(View, Vec<Figure>)>> {
    match READERS.iter().find(|(n, _)| *n == name) {
        Some((_, read)) => read(text),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::experiments::toy::{self, Toy};

    #[test]
    fn the_guide_shows_the_toy_experiment_whole_and_it_runs() {
        let guide = include_str!("../../../../docs/lab.md");
        assert!(guide.contains(include_str!("experiments/toy.rs")), "docs/lab.md must show lab/toy.rs as it is");
        let out = std::env::temp_dir().join(format!("iomux-toy-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let settings = Settings::for_test(out.clone());
        let outcome = execute::<Toy>(&toy::Args::default(), &settings).unwrap();
        assert_eq!(outcome.files.len(), 2, "toy.json and toy.md, no plot: {:?}", outcome.files);
        let text = std::fs::read_to_string(out.join("toy.json")).unwrap();
        let env: Envelope<toy::Params, toy::Arm, toy::Sample> = serde_json::from_str(&text).unwrap();
        assert_eq!((env.experiment.as_str(), env.claims.len()), ("toy", 1));
        assert!(env.takes.len() >= 2, "both arms measured: {} takes", env.takes.len());
        assert!(std::fs::read_to_string(out.join("toy.md")).unwrap().contains("| items"));
        std::fs::remove_dir_all(&out).ok();
    }
}
