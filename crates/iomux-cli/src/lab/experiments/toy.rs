//! The smallest experiment: does summing a vector twice as long take
//! twice the time? docs/lab.md shows this file whole, and a test runs it.

use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::{experiment_types, Entry, Experiment, Metric};
use crate::lab::harness::stats::Needed;
use crate::lab::harness::trial::{Measure, RoundView, Spec, Trial};
use crate::lab::harness::Rounds;
use crate::lab::render::markdown::cell as shown;
use crate::lab::render::view::{Shown, TableView, View};
use crate::lab::Settings;
use crate::CliResult;
use anyhow::anyhow;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The flags: `iomux bench toy --len N`, once registered.
#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// The shorter vector's length [default: 100000]
    #[arg(long)]
    pub len: Option<usize>,
}

/// What the run was asked for, checked; written to the JSON.
#[derive(Debug, Serialize, Deserialize)]
pub struct Params {
    len: usize,
}

/// One configuration measured: a vector's length.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    len: usize,
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} items", self.len)
    }
}

/// What one measurement of an arm gives.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    ns: f64,
}

pub struct Toy;

impl Experiment for Toy {
    experiment_types!(Args, Params, Arm, Sample);

    const ENTRY: Entry = Entry::new("toy", "T", "summing a vector twice as long");
    const PUBLISHED: &'static str = "twice the items, twice the time.";

    fn plan(args: &Args, _: &Settings) -> CliResult<Params> {
        match args.len.unwrap_or(100_000) {
            0 => Err(anyhow!("--len must be at least 1")),
            len => Ok(Params { len }),
        }
    }

    fn rounds(_: &Params) -> Rounds {
        Rounds::fixed(1, 2.0)
    }

    fn claims(p: &Params) -> Vec<Spec<Arm, Sample>> {
        let (short, long) = (Arm { len: p.len }, Arm { len: 2 * p.len });
        // Measured in the same round, so the ratio's interval is that of
        // paired samples.
        let ratio = move |r: &RoundView<Arm, Sample>| Some(r.get(&long)?.ns / r.get(&short)?.ns);
        vec![Spec::iomux("time at 2N / time at N", Needed::Within(1.5, 2.5), vec![short, long], ratio)
            .documents("twice the items take twice the time")]
    }

    fn metrics() -> Vec<Metric<Sample>> {
        vec![Metric { name: "time", unit: "ns", higher_is_better: false, get: |s| s.ns }]
    }

    fn first_arms(p: &Params, _: usize, _: &Trial<Arm, Sample>) -> Vec<Arm> {
        vec![Arm { len: p.len }, Arm { len: 2 * p.len }]
    }

    fn rig<'a>(_: &'a Params, _: &mut Trial<Arm, Sample>, _: &'a Settings) -> CliResult<Measure<'a, Arm, Sample>> {
        Ok(Box::new(|a: &Arm| {
            let v: Vec<u64> = (0..a.len as u64).collect();
            let start = Instant::now();
            std::hint::black_box(v.iter().sum::<u64>());
            Ok(Ok(Sample { ns: start.elapsed().as_nanos() as f64 }))
        }))
    }
}

impl Shown for Toy {
    fn view(env: &Envelope<Params, Arm, Sample>) -> CliResult<View> {
        let p = &env.params;
        let rows = [p.len, 2 * p.len]
            .iter()
            .map(|&len| vec![len.to_string(), shown(env.estimate(&Arm { len }, |s| s.ns))])
            .collect();
        let table = TableView { caption: String::new(), header: vec!["items".into(), "ns".into()], rows };
        Ok(View { intro: vec!["One sum of a vector per sample.".into()], tables: vec![table], ..View::default() })
    }
}
