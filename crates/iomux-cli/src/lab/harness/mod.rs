//! What every experiment is built on: sampling in rounds with a noise
//! reading per sample (`trial`), medians and ratios with 95% intervals
//! (`stats`; `pooled` for figures measured too few times), claims decided by their interval (`claim`), and the typed
//! envelope each experiment writes (`envelope`).

pub mod claim;
pub mod envelope;
pub mod experiment;
pub mod facts;
pub mod flags;
pub mod stats;
pub mod trial;

use crate::CliResult;
use anyhow::bail;
use iomux::Backend;
use serde::{Deserialize, Serialize};

/// Refuses a list flag with no value, or with a value named twice.
pub fn no_repeats<T: PartialEq + std::fmt::Display>(flag: &str, values: &[T]) -> CliResult<()> {
    if values.is_empty() {
        bail!("{flag} needs at least one value");
    }
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            bail!("{flag} names {v} twice");
        }
    }
    Ok(())
}

/// `display_as_value!(Load)`: `Display` by the name a `clap::ValueEnum`
/// value has on the command line, so the lab shows what a flag takes.
macro_rules! display_as_value {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let name = clap::ValueEnum::to_possible_value(self).map(|v| v.get_name().to_string());
                f.write_str(&name.unwrap_or_default())
            }
        }
    };
}
pub(crate) use display_as_value;

/// The backend of a server named `iomux-BACKEND` (as the lab names
/// iomux's servers beside their peers); None for any other name.
pub fn iomux_server(name: &str) -> Option<Result<Backend, String>> {
    name.strip_prefix("iomux-").map(crate::parse_backend)
}

/// Serde for a value written by name (`Display`) and read back with
/// `FromStr`, such as a backend.
pub mod by_name {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    pub fn serialize<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub fn deserialize<'de, T: FromStr, D: Deserializer<'de>>(d: D) -> Result<T, D::Error>
    where
        T::Err: Display,
    {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

/// [`by_name`] for a list.
pub mod by_names {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};
    use std::fmt::Display;
    use std::str::FromStr;

    pub fn serialize<T: Display, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|x| x.to_string()))
    }

    pub fn deserialize<'de, T: FromStr, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error>
    where
        T::Err: Display,
    {
        Vec::<String>::deserialize(d)?.iter().map(|s| s.parse().map_err(D::Error::custom)).collect()
    }
}

/// An arm of two parts: what serves (a server, or a proxy) and the load
/// put on it, shown as "SERVER LOAD". E9 and pub/sub's cells.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "S: std::fmt::Display, L: Serialize",
    deserialize = "S: std::str::FromStr, S::Err: std::fmt::Display, L: Deserialize<'de>"
))]
pub struct ServerUnder<S, L> {
    /// E9's results of 2026-12-07 and before name it `proxy`.
    #[serde(with = "by_name", alias = "proxy")]
    pub server: S,
    pub load: L,
}

impl<S: std::fmt::Display, L: std::fmt::Display> std::fmt::Display for ServerUnder<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.server, self.load)
    }
}

/// How many rounds every arm gets first, and how long more rounds may
/// take for claims still undecided: part of an experiment's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rounds {
    pub first_rounds: usize,
    pub budget_s: f64,
    /// `--full` without `--budget`: the budget grows to what the first
    /// rounds took to measure ([`trial::Trial::budget_as_needed`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_needed: bool,
}

impl Rounds {
    /// From `--reps` (else `quick` or `full` rounds) and `--budget` (else
    /// [`default_budget`] of `budget_full_s`); `--reps 0` is refused.
    pub fn plan(
        reps: Option<usize>,
        (quick, full): (usize, usize),
        budget: Option<f64>,
        budget_full_s: f64,
        settings: &crate::lab::Settings,
    ) -> CliResult<Rounds> {
        let first_rounds = reps.unwrap_or(if settings.full { full } else { quick });
        if first_rounds == 0 {
            bail!("--reps must be at least 1");
        }
        Ok(Rounds {
            first_rounds,
            budget_s: budget.unwrap_or_else(|| default_budget(budget_full_s, settings)),
            as_needed: budget.is_none() && settings.full,
        })
    }

    /// `first_rounds`, then rounds for undecided claims within `budget_s`.
    pub const fn fixed(first_rounds: usize, budget_s: f64) -> Rounds {
        Rounds { first_rounds, budget_s, as_needed: false }
    }
}

/// Quick settings give an experiment this fraction of its budget (1 in
/// 3): the whole quick bench has to fit in about 10 minutes on a 2-CPU
/// machine.
pub const QUICK_BUDGET_DIVISOR: f64 = 3.0;

/// An experiment's budget when `--budget` is not given: `full_s` with
/// `--full`, a third of it with quick settings.
pub fn default_budget(full_s: f64, settings: &crate::lab::Settings) -> f64 {
    if settings.full {
        full_s
    } else {
        full_s / QUICK_BUDGET_DIVISOR
    }
}

/// The help of every experiment's `--budget`.
pub fn budget_help(default_s: f64, extra: &str) -> String {
    format!(
        "Seconds for rounds beyond the six a 95% interval needs, while a claim is undecided (its interval straddles \
         its threshold) and rounds a run can afford would decide it; 0: the first rounds alone [default: {}; --full: \
         {default_s}, or as long as the first rounds took to measure if longer{extra}]",
        default_s / QUICK_BUDGET_DIVISOR
    )
}

/// Parses `--budget`: seconds, 0 or more.
pub fn parse_budget(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s}: must be a number of seconds, 0 or more")),
    }
}
