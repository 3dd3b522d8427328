//! The flags experiments share, each flattened into an experiment's own
//! (`#[command(flatten)]`): `--reps` and `--budget` ([`RoundFlags`]) and
//! `--backends` ([`BackendFlags`]). An experiment gives its defaults as a
//! type ([`RoundDefaults`], [`BackendDefaults`]), and the help shows them.

use std::marker::PhantomData;

use iomux::Backend;

use super::{budget_help, no_repeats, parse_budget, Rounds};
use crate::lab::Settings;
use crate::CliResult;

/// An experiment's defaults for `--reps` and `--budget`.
pub trait RoundDefaults: Clone + Default + Send + Sync + 'static {
    /// Rounds before any is added for undecided claims: (quick, full).
    const REPS: (usize, usize);
    /// Seconds for added rounds with `--full` (quick settings: a third).
    const BUDGET_S: f64;
    /// Said after the budget's default in its help, e.g. "; at full size: 0".
    const BUDGET_NOTE: &'static str = "";
    /// What a round does with the cells, in `--reps`'s help.
    const ROUND: &'static str = "the cells in another order each round";
    /// Said after the default in `--reps`'s help.
    const REPS_NOTE: &'static str = "";
}

/// An experiment's defaults for `--backends`.
pub trait BackendDefaults: Clone + Default + Send + Sync + 'static {
    /// iomux backends measured: (quick, full).
    const BACKENDS: (&'static [Backend], &'static [Backend]) = (&[Backend::Epoll, Backend::Uring], Backend::ALL);
    /// Said after the default in `--backends`'s help.
    const BACKENDS_NOTE: &'static str = "";
}

/// A default that differs between quick settings and `--full`; shown in
/// a flag's help as "[default: QUICK; --full: FULL]".
#[derive(Clone, Copy, Debug)]
pub struct QuickFull<T> {
    pub quick: T,
    pub full: T,
}

impl<T: Copy> QuickFull<T> {
    /// The value for these settings.
    pub fn pick(self, settings: &Settings) -> T {
        if settings.full {
            self.full
        } else {
            self.quick
        }
    }
}

impl<T: std::fmt::Display> std::fmt::Display for QuickFull<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[default: {}; --full: {}]", self.quick, self.full)
    }
}

/// The defaults most experiments take: one round (five with `--full`),
/// 30 s of added rounds with `--full`, and epoll and io_uring (all six
/// backends with `--full`).
#[derive(Clone, Debug, Default)]
pub struct Standard;

impl RoundDefaults for Standard {
    const REPS: (usize, usize) = (1, 5);
    const BUDGET_S: f64 = 30.0;
}

impl BackendDefaults for Standard {}

/// The flags every experiment on iomux's backends takes: `--backends`,
/// `--reps` and `--budget`, with `B`'s and `R`'s defaults.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct SharedFlags<B: BackendDefaults, R: RoundDefaults = B> {
    #[command(flatten)]
    pub backends: BackendFlags<B>,
    #[command(flatten)]
    pub rounds: RoundFlags<R>,
}

/// `--reps` and `--budget`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct RoundFlags<D: RoundDefaults> {
    #[arg(long, help = reps_help::<D>())]
    pub reps: Option<usize>,
    #[arg(long, value_parser = parse_budget, help = budget_help(D::BUDGET_S, D::BUDGET_NOTE))]
    pub budget: Option<f64>,
    #[arg(skip)]
    defaults: PhantomData<D>,
}

impl<D: RoundDefaults> RoundFlags<D> {
    /// The flags as if given on the command line.
    #[cfg(test)]
    pub fn given(reps: Option<usize>, budget: Option<f64>) -> Self {
        RoundFlags { reps, budget, defaults: PhantomData }
    }

    /// The rounds these flags, or else `D`'s defaults, ask for.
    pub fn rounds(&self, settings: &Settings) -> CliResult<Rounds> {
        Rounds::plan(self.reps, D::REPS, self.budget, D::BUDGET_S, settings)
    }
}

fn reps_help<D: RoundDefaults>() -> String {
    let (quick, full) = D::REPS;
    format!(
        "Rounds before any is added for undecided claims, {} [default: {quick}; --full: {full}{}]",
        D::ROUND,
        D::REPS_NOTE
    )
}

/// `--backends`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct BackendFlags<D: BackendDefaults> {
    #[arg(long, value_delimiter = ',', value_parser = crate::parse_backend, help = backends_help(D::BACKENDS, D::BACKENDS_NOTE))]
    pub backends: Option<Vec<Backend>>,
    #[arg(skip)]
    defaults: PhantomData<D>,
}

impl<D: BackendDefaults> BackendFlags<D> {
    /// The backends given, else `D`'s quick or `full` ones; none twice.
    pub fn chosen(&self, full: bool) -> CliResult<Vec<Backend>> {
        let (quick, all) = D::BACKENDS;
        let backends = self.backends.clone().unwrap_or_else(|| if full { all } else { quick }.to_vec());
        no_repeats("--backends", &backends)?;
        Ok(backends)
    }
}

fn backends_help((quick, full): (&[Backend], &[Backend]), note: &str) -> String {
    let names = |b: &[Backend]| {
        if b == Backend::ALL {
            "all six".to_string()
        } else {
            b.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(", ")
        }
    };
    let default = if quick == full { names(quick) } else { format!("{}; --full: {}", names(quick), names(full)) };
    format!("iomux backends, comma-separated [default: {default}{note}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Clone, Debug, Default)]
    struct Sample;
    impl RoundDefaults for Sample {
        const REPS: (usize, usize) = (2, 7);
        const BUDGET_S: f64 = 60.0;
    }
    impl BackendDefaults for Sample {}

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        rounds: RoundFlags<Sample>,
        #[command(flatten)]
        backends: BackendFlags<Sample>,
    }

    #[test]
    fn the_help_shows_the_experiments_defaults() {
        let help = <Cli as clap::CommandFactory>::command().render_help().to_string();
        assert!(help.contains("[default: 2; --full: 7]"), "{help}");
        assert!(help.contains("[default: 20; --full: 60, or as long as the first rounds took"), "{help}");
        assert!(help.contains("[default: epoll, uring; --full: all six]"), "{help}");
    }

    #[test]
    fn flags_override_the_defaults_and_repeats_are_refused() {
        let quick = Settings::for_test(std::env::temp_dir());
        let cli = Cli::parse_from(["t"]);
        assert_eq!(cli.rounds.rounds(&quick).unwrap(), Rounds::fixed(2, 20.0));
        assert_eq!(cli.backends.chosen(false).unwrap(), [Backend::Epoll, Backend::Uring]);
        let cli = Cli::parse_from(["t", "--reps", "4", "--budget", "0", "--backends", "poll,select"]);
        assert_eq!(cli.rounds.rounds(&quick).unwrap(), Rounds::fixed(4, 0.0));
        assert_eq!(cli.backends.chosen(false).unwrap(), [Backend::Poll, Backend::Select]);
        let cli = Cli::parse_from(["t", "--backends", "poll,poll"]);
        assert!(cli.backends.chosen(false).is_err());
        assert!(Cli::try_parse_from(["t", "--budget", "-1"]).is_err());
        // --full without --budget: as the undecided claims need.
        let full = Settings { full: true, ..Settings::for_test(std::env::temp_dir()) };
        let as_needed = Rounds { as_needed: true, ..Rounds::fixed(7, 60.0) };
        assert_eq!(Cli::parse_from(["t"]).rounds.rounds(&full).unwrap(), as_needed);
        assert_eq!(Cli::parse_from(["t", "--budget", "5"]).rounds.rounds(&full).unwrap(), Rounds::fixed(7, 5.0));
    }
}
