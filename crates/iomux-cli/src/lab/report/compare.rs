//! `iomux report A B`: two results folders side by side (two machines, two
//! kernels, before and after a change): the machines, each side's
//! verdicts, and every figure's change B/A with its 95% interval, "no
//! change within noise" where the interval says so.

use crate::lab::harness::claim::{number, Claim};
use crate::lab::harness::envelope::Figure;
use crate::lab::harness::stats::pooled::Spread;
use crate::lab::harness::stats::{median, Change, NOISE_THRESHOLD};
use crate::lab::render::html::render;
use crate::lab::render::table::Table;
use crate::lab::render::view::TableView;
use crate::lab::report::drift::{Drift, RoundEffects};
use crate::lab::report::results::Folder;
use crate::CliResult;
use anyhow::{bail, Context as _};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What `write` produced.
#[derive(Debug)]
pub struct Written {
    /// The HTML page.
    pub path: PathBuf,
    /// Verdicts and changes, for the terminal.
    pub summary: String,
}

/// One figure's change from A to B.
#[derive(Debug)]
pub struct Compared<'a> {
    pub experiment: &'static str,
    pub a: &'a Figure,
    pub b: &'a Figure,
    /// None when either side has no sample.
    pub change: Option<Change>,
    /// How the reference programs' figures of this kind in this
    /// experiment moved from A to B, this figure left out (`drift`).
    pub drift: Option<Drift>,
}

impl Compared<'_> {
    /// The change over the machine's drift, its interval widened by where
    /// a figure that moved only with the machine falls (a 95% prediction
    /// interval from the references' scatter, added in quadrature on the
    /// logarithm). None without a drift, a 95% interval, or with a zero.
    pub fn beside_drift(&self) -> Option<Change> {
        let (c, d) = (self.change.filter(Change::told)?, self.drift?);
        let positive = |f: &Figure| f.samples.iter().all(|&x| x > 0.0);
        if !(positive(self.a) && positive(self.b)) {
            return None;
        }
        let shift = c.ratio.ln() - d.ratio.ln();
        let (below, above) = (c.ratio.ln() - c.lo.ln(), c.hi.ln() - c.ratio.ln());
        let h = d.half_width();
        Some(Change { ratio: shift.exp(), lo: (shift - below.hypot(h)).exp(), hi: (shift + above.hypot(h)).exp(), ..c })
    }

    /// Some(true) for no change within noise (beside the machine's drift
    /// where the experiment has one); None when there is too little to tell.
    pub fn same(&self) -> Option<bool> {
        let c = self.change.filter(Change::told)?;
        Some(self.beside_drift().unwrap_or(c).within_noise())
    }

    /// "no change within noise", or "B higher by 12.0% [+8.1%, +15.2%] (worse)".
    pub fn verdict(&self) -> String {
        let Some(c) = self.change else { return "not comparable (no samples on one side)".into() };
        if !c.told() {
            return format!(
                "too few samples to tell (A {}, B {}; {} on a side needed)",
                c.samples.0,
                c.samples.1,
                crate::lab::harness::stats::MIN_CHANGE_SAMPLES
            );
        }
        let pooled = if c.pooled { "; interval from its kind's spread" } else { "" };
        let better = (c.ratio > 1.0) == self.a.higher_is_better;
        let moved = |x: Change| {
            format!(
                "B {} by {:.1}% [{:+.1}%, {:+.1}%]",
                if x.ratio > 1.0 { "higher" } else { "lower" },
                pct(x.ratio).abs(),
                pct(x.lo),
                pct(x.hi)
            )
        };
        let (Some(x), Some(d)) = (self.beside_drift(), self.drift) else {
            if c.within_noise() {
                return format!(
                    "no change within noise{}",
                    if c.pooled { " (interval from its kind's spread)" } else { "" }
                );
            }
            return format!("{} ({}{pooled})", moved(c), if better { "better" } else { "worse" });
        };
        let references = format!("the reference programs moved {:+.1}%", pct(d.ratio));
        match (x.within_noise(), c.within_noise()) {
            (true, true) => format!("no change within noise ({references}{pooled})"),
            (true, false) => {
                format!("no change within noise beside the machine's drift: {}, {references}{pooled}", moved(c))
            }
            (false, _) => format!(
                "{} beside the machine's drift ({}; measured: {}{pooled})",
                moved(x),
                if (x.ratio > 1.0) == self.a.higher_is_better { "better" } else { "worse" },
                moved(c).replacen("B ", "", 1)
            ),
        }
    }
}

fn pct(ratio: f64) -> f64 {
    (ratio - 1.0) * 100.0
}

/// One kind of figure in one experiment, read from both sides once.
struct Kind {
    effects: (RoundEffects, RoundEffects),
    spread: Option<Spread>,
    /// Each reference figure's name and log ratio B/A (of steadied medians).
    references: Vec<(String, f64)>,
}

impl Kind {
    /// Every kind of figure in A, in the order first met, each read once.
    fn all<'f>(in_a: &'f [Figure], in_b: &'f [Figure]) -> Vec<((&'f str, &'f str), Kind)> {
        let mut kinds: Vec<((&str, &str), Kind)> = Vec::new();
        for f in in_a {
            let kind = kind_of(f);
            if !kinds.iter().any(|(k, _)| *k == kind) {
                kinds.push((kind, Kind::read(in_a, in_b, kind)));
            }
        }
        kinds
    }

    fn read<'f>(in_a: &'f [Figure], in_b: &'f [Figure], kind: (&str, &str)) -> Kind {
        let of_kind = |figures: &'f [Figure]| figures.iter().filter(|f| kind_of(f) == kind).collect::<Vec<_>>();
        let (a, b) = (of_kind(in_a), of_kind(in_b));
        let effects = (RoundEffects::read(a.iter().copied()), RoundEffects::read(b.iter().copied()));
        let steady = |figures: &[&Figure], e: &RoundEffects| -> Vec<Vec<f64>> {
            figures.iter().map(|f| e.steady(f).values).collect()
        };
        let (steady_a, steady_b) = (steady(&a, &effects.0), steady(&b, &effects.1));
        let spread =
            Spread::pooled(steady_a.iter().chain(&steady_b).map(Vec::as_slice), effects.0.count() + effects.1.count());
        let references = a
            .iter()
            .zip(&steady_a)
            .filter(|(f, _)| f.reference)
            .filter_map(|(fa, va)| {
                let vb = &steady_b[b.iter().position(|f| f.name == fa.name)?];
                let ratio = median(vb)? / median(va)?;
                (ratio.is_finite() && ratio > 0.0).then(|| (fa.name.clone(), ratio.ln()))
            })
            .collect();
        Kind { effects, spread, references }
    }

    /// The drift of every reference figure but `except`.
    fn drift(&self, except: Option<&str>) -> Option<Drift> {
        Drift::of(
            &self.references.iter().filter(|(n, _)| Some(n.as_str()) != except).map(|(_, r)| *r).collect::<Vec<_>>(),
        )
    }
}

/// Every figure both folders hold, experiment by experiment. A figure
/// with too few samples for its own interval is steadied by its rounds'
/// effects and borrows the pooled spread of the repeated figures of its
/// kind in the same experiment, both sides (`drift`, `harness::pooled`).
pub fn changes<'a>(fa: &'a Folder, fb: &'a Folder) -> Vec<Compared<'a>> {
    let mut out = Vec::new();
    for ra in &fa.results {
        let Some(rb) = fb.get(ra.entry.name) else { continue };
        let (in_a, in_b) = (&ra.header.figures, &rb.header.figures);
        let kinds = Kind::all(in_a, in_b);
        for a in in_a {
            let Some(b) = in_b.iter().find(|b| b.name == a.name) else { continue };
            let Some((_, k)) = kinds.iter().find(|(x, _)| *x == kind_of(a)) else { continue };
            let change = Change::between(&a.samples, &b.samples).map(|c| {
                if c.told() {
                    return c;
                }
                let (sa, sb) = (k.effects.0.steady(a), k.effects.1.steady(b));
                k.spread.and_then(|s| Change::from_spread(&sa, &sb, s)).unwrap_or(c)
            });
            // Only where the machine moved (`Drift::moved`).
            let drift = k.drift(Some(&a.name)).filter(Drift::moved);
            out.push(Compared { experiment: ra.entry.name, a, b, change, drift });
        }
    }
    out
}

/// The machine's drift per experiment and kind that has one: every
/// reference figure's.
fn drift_rows(fa: &Folder, fb: &Folder) -> TableView {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for ra in &fa.results {
        let Some(rb) = fb.get(ra.entry.name) else { continue };
        for ((metric, unit), k) in Kind::all(&ra.header.figures, &rb.header.figures) {
            let Some(d) = k.drift(None) else { continue };
            let h = d.half_width();
            rows.push(vec![
                ra.entry.name.to_string(),
                format!("{metric} ({unit})"),
                format!("{:.3}", d.ratio),
                format!("[{:.3}, {:.3}]", d.ratio * (-h).exp(), d.ratio * h.exp()),
                d.n.to_string(),
                if d.moved() { "yes" } else { "no: figures judged as measured" }.to_string(),
            ]);
        }
    }
    TableView {
        caption: String::new(),
        header: [
            "experiment",
            "figure",
            "B/A of the reference programs",
            "one more would fall in (95%)",
            "figures",
            "the machine moved",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// What a figure measures, whatever the cell: its metric and unit
/// ("p99 latency", "us").
fn kind_of(f: &Figure) -> (&str, &str) {
    (&f.metric, &f.unit)
}

/// "1.23 [1.20, 1.25]".
fn interval(f: &Figure) -> String {
    f.estimate.map_or("-".into(), |e| format!("{} [{}, {}]", number(e.median), number(e.lo), number(e.hi)))
}

fn claim_text(c: Option<&Claim>) -> (String, String) {
    match c {
        Some(c) => (c.verdict.as_str().to_string(), c.measured()),
        None => ("-".into(), "-".into()),
    }
}

/// Claims of both sides, matched by experiment and quantity.
fn verdict_rows(fa: &Folder, fb: &Folder) -> Vec<[String; 5]> {
    let mut rows = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for f in [fa, fb] {
        for r in &f.results {
            for c in &r.header.claims {
                if seen.contains(&(r.entry.name, c.quantity.as_str())) {
                    continue;
                }
                seen.push((r.entry.name, c.quantity.as_str()));
                let find = |g: &'_ Folder| {
                    g.get(r.entry.name).and_then(|x| x.header.claims.iter().find(|y| y.quantity == c.quantity)).cloned()
                };
                let ((va, ma), (vb, mb)) = (claim_text(find(fa).as_ref()), claim_text(find(fb).as_ref()));
                rows.push([format!("{}: {}", r.entry.label, c.title()), va, ma, vb, mb]);
            }
        }
    }
    rows
}

#[derive(Serialize)]
struct ChangeSection {
    name: &'static str,
    label: &'static str,
    table: Option<TableView>,
    why: String,
}

fn machine_rows(fa: &Folder, fb: &Folder) -> TableView {
    let fields = |f: &Folder| -> Vec<String> {
        match f.machine() {
            Some(m) => vec![
                m.kernel.clone(),
                m.cpu_model.clone(),
                m.cpus.to_string(),
                format!("{:.1} GiB", m.memory_bytes as f64 / (1u64 << 30) as f64),
                format!("{} (hard {})", m.nofile, m.nofile_hard),
                m.io_uring_disabled.clone().unwrap_or_else(|| "-".into()),
            ],
            None => vec!["-".into(); 6],
        }
    };
    let (a, b) = (fields(fa), fields(fb));
    let names = ["kernel", "CPU", "CPUs", "memory", "RLIMIT_NOFILE", "io_uring_disabled"];
    TableView {
        caption: String::new(),
        header: vec!["".into(), "A".into(), "B".into()],
        rows: names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mark = if a[i] != b[i] { " (differs)" } else { "" };
                vec![format!("{n}{mark}"), a[i].clone(), b[i].clone()]
            })
            .collect(),
    }
}

/// Compares results folder `b` with `a` and writes the page to `out`, or
/// to `b/compare-<name of a>.html`.
pub fn write(a: &Path, b: &Path, out: Option<&Path>) -> CliResult<Written> {
    let (fa, fb) = (Folder::read(a)?, Folder::read(b)?);
    let names = |f: &Folder| f.results.iter().map(|r| r.entry.name).collect::<Vec<_>>();
    let both: Vec<&str> = names(&fa).into_iter().filter(|n| fb.get(n).is_some()).collect();
    if both.is_empty() {
        bail!(
            "no experiment in common: {} holds {}; {} holds {}",
            a.display(),
            names(&fa).join(", "),
            b.display(),
            names(&fb).join(", ")
        );
    }
    let path = match out {
        Some(p) => p.to_path_buf(),
        None => b.join(format!("compare-{}.html", folder_name(a))),
    };
    let compared = changes(&fa, &fb);
    let told = |c: &&Compared| c.change.is_some_and(|x| x.told());
    let same = compared.iter().filter(|c| c.same() == Some(true)).count();
    let changed = compared.iter().filter(|c| c.same() == Some(false)).count();
    let untold = compared.iter().filter(|c| c.change.is_some() && !told(c)).count();
    let beside_drift =
        compared.iter().filter(|c| c.same() == Some(true) && c.change.is_some_and(|x| !x.within_noise())).count();
    let own: Vec<&Compared> = compared.iter().filter(|c| !c.a.reference && c.change.is_some()).collect();
    let own_same = own.iter().filter(|c| c.same() == Some(true)).count();
    let pooled = compared.iter().filter(|c| c.change.is_some_and(|x| x.pooled)).count();
    let verdict_line = format!(
        "{} figures compared: {same} show no change within noise, {changed} changed, {untold} have too few samples \
         to tell; of iomux's own (the reference programs' left out), {own_same} of {} show no change. {beside_drift} \
         of the unchanged moved more than {}% but no further than the reference programs measured beside them \
         (the machine's drift). {pooled} figures had fewer than {} samples on a side: their interval rests on the \
         spread of the repeated figures of the same kind in the same experiment, their takes steadied by their \
         rounds' effects where these could be read.",
        same + changed + untold,
        own.len(),
        NOISE_THRESHOLD * 100.0,
        crate::lab::harness::stats::MIN_CHANGE_SAMPLES
    );
    let drifts = drift_rows(&fa, &fb);
    let sections: Vec<ChangeSection> = fa
        .results
        .iter()
        .filter(|r| fb.get(r.entry.name).is_some())
        .map(|r| {
            let mine: Vec<&Compared> = compared.iter().filter(|c| c.experiment == r.entry.name).collect();
            let table = (!mine.is_empty()).then(|| TableView {
                caption: String::new(),
                header: ["figure", "unit", "A", "B", "B/A [95% interval]", "verdict"].map(String::from).to_vec(),
                rows: mine
                    .iter()
                    .map(|c| {
                        vec![
                            c.a.name.clone(),
                            c.a.unit.clone(),
                            interval(c.a),
                            interval(c.b),
                            c.change.map_or("-".into(), |x| format!("{:.3} [{:.3}, {:.3}]", x.ratio, x.lo, x.hi)),
                            c.verdict(),
                        ]
                    })
                    .collect(),
            });
            ChangeSection {
                name: r.entry.name,
                label: r.entry.label,
                table,
                why: "No figure with samples on both sides (results written by an older iomux carry none).".into(),
            }
        })
        .collect();
    let list = |v: Vec<&str>| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    let verdicts = verdict_rows(&fa, &fb);
    let html = render(
        "compare.html",
        minijinja::context! {
            a => a.display().to_string(),
            b => b.display().to_string(),
            verdict_line => verdict_line.clone(),
            machines => machine_rows(&fa, &fb),
            both => list(both.clone()),
            only_a => list(names(&fa).into_iter().filter(|n| fb.get(n).is_none()).collect()),
            only_b => list(names(&fb).into_iter().filter(|n| fa.get(n).is_none()).collect()),
            verdicts => TableView {
                caption: String::new(),
                header: ["claim", "A", "A measured", "B", "B measured"].map(String::from).to_vec(),
                rows: verdicts.iter().map(|r| r.to_vec()).collect(),
            },
            noise_pct => NOISE_THRESHOLD * 100.0,
            drifts => drifts.clone(),
            changes => sections,
        },
    )?;
    std::fs::write(&path, html).with_context(|| format!("cannot write {}", path.display()))?;

    let mut summary = format!("A: {}\nB: {}\n", a.display(), b.display());
    let mut t = Table::new(["claim", "A", "A measured", "B", "B measured"]);
    for r in &verdicts {
        t.row(r.iter().cloned());
    }
    summary += &t.render();
    if !drifts.rows.is_empty() {
        let mut t = Table::new(drifts.header.clone());
        for r in &drifts.rows {
            t.row(r.iter().cloned());
        }
        summary += &format!("\nThe machine's drift from A to B, read from the reference programs:\n{}", t.render());
    }
    summary += &format!("\n{verdict_line}\n");
    let changed: Vec<&Compared> = compared.iter().filter(|c| c.same() == Some(false)).collect();
    if !changed.is_empty() {
        let mut t = Table::new(["changed figure", "A", "B", "change"]);
        for c in changed {
            t.row([format!("{}: {}", c.experiment, c.a.name), interval(c.a), interval(c.b), c.verdict()]);
        }
        summary += &t.render();
    }
    Ok(Written { path, summary })
}

/// The folder's last component, even for `.` or `results/run/..`.
fn folder_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "A".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::experiments::idle::fixture;
    use crate::lab::harness::envelope;
    use crate::lab::report::drift::Drift;
    use iomux::Backend::{Epoll, Poll};

    /// Asserts that the summary holds every one of `parts`.
    fn says(w: &Written, parts: &[&str]) {
        for part in parts {
            assert!(w.summary.contains(part), "{part:?} not in:\n{}", w.summary);
        }
    }

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn folder(name: &str, poll_at_100: f64) -> Dir {
        folder_with_once(name, poll_at_100, None)
    }

    /// With `once`, poll at Z = 200 measured once (in the first round)
    /// beside the repeated arms, as a quick run's first-round cells are.
    fn folder_with_once(name: &str, poll_at_100: f64, once: Option<f64>) -> Dir {
        folder_with_slow_round(name, poll_at_100, once, 1.0)
    }

    /// And its first round `slow` times slower for every arm.
    fn folder_with_slow_round(name: &str, poll_at_100: f64, once: Option<f64>, slow: f64) -> Dir {
        let dir = std::env::temp_dir().join(format!("iomux-compare-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut env = fixture(&[(Epoll, 0, 0.4), (Epoll, 100, 0.4), (Poll, 0, 0.4), (Poll, 100, poll_at_100)], 8);
        if let Some(seconds) = once {
            env.takes.push(crate::lab::experiments::idle::fixture_take(Poll, 200, seconds, 0));
        }
        crate::lab::experiments::idle::slow_round(&mut env, 0, slow);
        envelope::write(&dir, &env).unwrap();
        Dir(dir)
    }

    #[test]
    fn a_figure_measured_once_is_judged_by_its_kinds_spread() {
        let (a, b) = (folder_with_once("once-a", 0.5, Some(0.5)), folder_with_once("once-b", 0.5, Some(0.51)));
        let w = write(&a.0, &b.0, None).unwrap();
        assert!(w.summary.contains("show no change within noise, 0 changed, 0 have too few"), "{}", w.summary);
        // Its seconds, server CPU and p99 latency.
        assert!(w.summary.contains("3 figures had fewer than 4 samples on a side"), "{}", w.summary);
        let html = std::fs::read_to_string(&w.path).unwrap();
        assert!(html.contains("no change within noise (interval from its kind&#x27;s spread)"), "{html}");
        // The repeated figures vary by 0.2%: a 30% step on one take is a change.
        let c = folder_with_once("once-c", 0.5, Some(0.65));
        let w = write(&a.0, &c.0, None).unwrap();
        says(&w, &["2 changed", "poll, Z = 200: seconds"]);
        // The fixture's spread is all round effect: steadied, none is left.
        says(&w, &["B higher by 30.0% [+30.0%, +30.0%]", "(worse; interval from its kind's spread)"]);
    }

    #[test]
    fn a_take_in_a_round_slow_for_every_arm_is_steadied() {
        let a = folder_with_once("steady-a", 0.5, Some(0.5));
        // B's first round 10% slow for every arm, the one measured once too.
        let b = folder_with_slow_round("steady-b", 0.5, Some(0.5), 1.1);
        let w = write(&a.0, &b.0, None).unwrap();
        assert!(w.summary.contains(" 0 changed"), "{}", w.summary);
        // The same take 10% slow in a round no other arm found slow.
        let c = folder_with_once("steady-c", 0.5, Some(0.55));
        let w = write(&a.0, &c.0, None).unwrap();
        assert!(w.summary.contains("2 changed") && w.summary.contains("B higher by 10.0%"), "{}", w.summary);
    }

    fn figure(name: &str, samples: &[f64], reference: bool) -> Figure {
        let (arm, metric) = name.rsplit_once(": ").unwrap_or(("", name));
        Figure {
            name: name.into(),
            arm: arm.into(),
            metric: metric.into(),
            unit: "1/s".into(),
            higher_is_better: true,
            estimate: crate::lab::harness::stats::Estimate::of(samples),
            samples: samples.to_vec(),
            rounds: (0..samples.len()).collect(),
            reference,
        }
    }

    #[test]
    fn a_move_as_far_as_the_references_is_the_machines_drift() {
        let base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2];
        let scaled = |f: f64| base.map(|x| x * f);
        let a = figure("iomux: requests/s", &base, false);
        let refs = |moves: &[f64]| Drift::of(&moves.iter().map(|m: &f64| m.ln()).collect::<Vec<_>>());
        let compare = |b: &Figure, drift: Option<Drift>| {
            let c = Compared { experiment: "http", a: &a, b, change: Change::between(&a.samples, &b.samples), drift };
            (c.same(), c.verdict())
        };
        let machine = refs(&[0.87, 0.88, 0.9, 0.89, 0.86, 0.88]).filter(Drift::moved);
        assert!(machine.is_some());
        // Everything 12% slower, the references too: the machine.
        let (same, verdict) = compare(&figure("iomux: requests/s", &scaled(0.88), false), machine);
        assert_eq!(same, Some(true), "{verdict}");
        assert!(
            verdict.starts_with("no change within noise beside the machine's drift: B lower by 12.0%"),
            "{verdict}"
        );
        // 30% slower where the references lost 12%: a change of ~20% beside them.
        let (same, verdict) = compare(&figure("iomux: requests/s", &scaled(0.7), false), machine);
        assert_eq!(same, Some(false), "{verdict}");
        assert!(verdict.starts_with("B lower by 20.4% ["), "{verdict}");
        assert!(verdict.contains("beside the machine's drift (worse; measured: lower by 30.0%"), "{verdict}");
        // The machine 12% faster, iomux as it was: iomux fell behind.
        let faster = refs(&[1.13, 1.12, 1.1, 1.11, 1.14, 1.12]).filter(Drift::moved);
        let (same, verdict) = compare(&figure("iomux: requests/s", &scaled(1.0), false), faster);
        assert_eq!(same, Some(false), "{verdict}");
        // References scattered around 1: no drift to read, 33% is a change.
        assert!(refs(&[0.62, 1.0, 1.1, 1.35]).filter(Drift::moved).is_none());
        let (same, verdict) = compare(&figure("iomux: requests/s", &scaled(0.67), false), None);
        assert_eq!(same, Some(false), "{verdict}");
        assert!(verdict.starts_with("B lower by 33.0% ["), "{verdict}");
    }

    #[test]
    fn the_same_figures_twice_are_no_change_within_noise() {
        let (a, b) = (folder("same-a", 0.5), folder("same-b", 0.5));
        let w = write(&a.0, &b.0, None).unwrap();
        assert!(w.summary.contains("show no change within noise, 0 changed"), "{}", w.summary);
        let html = std::fs::read_to_string(&w.path).unwrap();
        assert!(html.contains("no change within noise") && !html.contains("B higher"), "{html}");
    }

    #[test]
    fn a_slowdown_is_reported_with_its_interval() {
        let (a, b) = (folder("slow-a", 0.5), folder("slow-b", 0.65));
        let w = write(&a.0, &b.0, None).unwrap();
        // poll at Z = 100: seconds and server CPU, 30% higher (worse).
        says(&w, &["2 changed", "idle: poll, Z = 100: seconds", "B higher by 30.0% [+2", "(worse)"]);
    }

    #[test]
    fn folders_with_nothing_in_common_are_refused() {
        let a = folder("lone", 0.5);
        let empty = std::env::temp_dir().join(format!("iomux-compare-{}-empty", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let empty = Dir(empty);
        let err = write(&a.0, &empty.0, None).unwrap_err().to_string();
        assert!(err.contains("holds no experiment results"), "{err}");
    }
}
