//! `iomux report A B`: two results folders side by side (two machines, two
//! kernels, before and after a change): the machines, each side's
//! verdicts, and every figure's change B/A with its 95% interval, "no
//! change within noise" where the interval says so.

use super::drift::{machine_drift, round_effects, steadied};
use super::harness::claim::{number, Claim};
use super::harness::envelope::Figure;
use super::harness::experiment::TableView;
use super::harness::pooled::Spread;
use super::harness::stats::{Change, Estimate, NOISE_THRESHOLD};
use super::render::html::render;
use super::results::Folder;
use super::table::Table;
use crate::CliResult;
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
    /// How the figures of programs iomux did not write, of this kind in
    /// this experiment, moved from A to B (`drift`).
    pub drift: Option<Estimate>,
}

impl Compared<'_> {
    /// The change with the machine's drift taken out: B/A over the
    /// drift's, the interval widened by the drift's own.
    pub fn beside_drift(&self) -> Option<Change> {
        let (c, d) = (self.change?, self.drift?);
        Some(Change { ratio: c.ratio / d.median, lo: c.lo / d.hi, hi: c.hi / d.lo, ..c })
    }

    /// Some(true) for no change within noise, as measured or once the
    /// machine's drift is out; None when there is too little to tell.
    pub fn same(&self) -> Option<bool> {
        let c = self.change.filter(Change::told)?;
        Some(c.within_noise() || self.beside_drift().is_some_and(|x| x.within_noise()))
    }

    /// "no change within noise", or "B higher by 12.0% [8.1%, 15.2%] (worse)".
    pub fn verdict(&self) -> String {
        let Some(c) = self.change else { return "not comparable (no samples on one side)".into() };
        if !c.told() {
            return format!(
                "too few samples to tell (A {}, B {}; {} a side needed)",
                c.samples.0,
                c.samples.1,
                crate::lab::harness::stats::MIN_CHANGE_SAMPLES
            );
        }
        let pooled = if c.pooled { "; interval from its kind's spread" } else { "" };
        let pct = |r: f64| (r - 1.0) * 100.0;
        let drift = |d: Estimate| format!("the programs iomux did not write moved {:+.1}%", pct(d.median));
        if c.within_noise() {
            return format!(
                "no change within noise{}",
                if c.pooled { " (interval from its kind's spread)" } else { "" }
            );
        }
        if let (Some(x), Some(d)) = (self.beside_drift(), self.drift) {
            if x.within_noise() {
                return format!("no change within noise beside the machine's drift ({}{pooled})", drift(d));
            }
        }
        let better = (c.ratio > 1.0) == self.a.higher_is_better;
        let beside = match (self.beside_drift(), self.drift) {
            (Some(x), Some(d)) => {
                format!(
                    "; beside the machine's drift ({}): {:+.1}% [{:+.1}%, {:+.1}%]",
                    drift(d),
                    pct(x.ratio),
                    pct(x.lo),
                    pct(x.hi)
                )
            }
            _ => String::new(),
        };
        format!(
            "B {} by {:.1}% [{:+.1}%, {:+.1}%] ({}{pooled}{beside})",
            if c.ratio > 1.0 { "higher" } else { "lower" },
            pct(c.ratio).abs(),
            pct(c.lo),
            pct(c.hi),
            if better { "better" } else { "worse" }
        )
    }
}

/// Every figure both folders hold, experiment by experiment. A figure
/// with too few samples for its own interval is steadied by its round's
/// effect (`drift`) and borrows the pooled spread of the repeated figures
/// of its kind in the same experiment, both sides.
pub fn changes<'a>(fa: &'a Folder, fb: &'a Folder) -> Vec<Compared<'a>> {
    let mut out = Vec::new();
    for ra in &fa.results {
        let Some(rb) = fb.get(ra.entry.name) else { continue };
        let (in_a, in_b) = (&ra.header.figures, &rb.header.figures);
        let pairs: Vec<(&Figure, &Figure)> =
            in_a.iter().filter_map(|a| Some((a, in_b.iter().find(|b| b.name == a.name)?))).collect();
        let of_kind = |figures: &'a [Figure], kind| figures.iter().filter(move |f| kind_of(f) == kind);
        for &(a, b) in &pairs {
            let kind = kind_of(a);
            let change = Change::between(&a.samples, &b.samples).map(|c| {
                if c.told() {
                    return c;
                }
                let spread =
                    Spread::pooled(of_kind(in_a, kind).chain(of_kind(in_b, kind)).map(|f| f.samples.as_slice()));
                let sa = steadied(a, &round_effects(of_kind(in_a, kind)));
                let sb = steadied(b, &round_effects(of_kind(in_b, kind)));
                spread.and_then(|s| Change::from_spread(&sa, &sb, s)).unwrap_or(c)
            });
            let drift = machine_drift(pairs.iter().copied().filter(|(x, _)| kind_of(x) == kind));
            out.push(Compared { experiment: ra.entry.name, a, b, change, drift });
        }
    }
    out
}

/// What a figure measures, whatever the cell: its metric and unit
/// ("p99 latency", "us").
fn kind_of(f: &Figure) -> (&str, &str) {
    (f.name.rsplit(": ").next().unwrap_or(&f.name), &f.unit)
}

/// The machine's drift, once per experiment and kind that has one.
fn drift_rows(compared: &[Compared]) -> TableView {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for c in compared {
        let Some(d) = c.drift else { continue };
        let (metric, unit) = kind_of(c.a);
        let row = vec![
            c.experiment.to_string(),
            format!("{metric} ({unit})"),
            format!("{:.3} [{:.3}, {:.3}]", d.median, d.lo, d.hi),
            d.n.to_string(),
        ];
        if !rows.contains(&row) {
            rows.push(row);
        }
    }
    TableView {
        caption: String::new(),
        header: ["experiment", "figure", "B/A of the programs iomux did not write", "figures"]
            .map(String::from)
            .to_vec(),
        rows,
    }
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
        return Err(format!(
            "no experiment in common: {} holds {}; {} holds {}",
            a.display(),
            names(&fa).join(", "),
            b.display(),
            names(&fb).join(", ")
        )
        .into());
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
    let pooled = compared.iter().filter(|c| c.change.is_some_and(|x| x.pooled)).count();
    let verdict_line = format!(
        "{} figures compared: {same} show no change within noise, {changed} changed, {untold} have too few samples \
         to tell. {beside_drift} of the unchanged moved only as far as the programs iomux did not write, measured \
         beside them (the machine's drift). {pooled} of the figures had fewer than {} samples a side, too few for a \
         rank interval of their own: theirs rests on the spread of the repeated figures of the same kind in the same \
         experiment, each take steadied by its round's effect.",
        same + changed + untold,
        crate::lab::harness::stats::MIN_CHANGE_SAMPLES
    );
    let drifts = drift_rows(&compared);
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
    std::fs::write(&path, html).map_err(|e| format!("cannot write {}: {e}", path.display()))?;

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
        summary +=
            &format!("\nThe machine's drift from A to B, read from the programs iomux did not write:\n{}", t.render());
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
    use iomux::Backend::{Epoll, Poll};

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
        let dir = std::env::temp_dir().join(format!("iomux-compare-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut env = fixture(&[(Epoll, 0, 0.4), (Epoll, 100, 0.4), (Poll, 0, 0.4), (Poll, 100, poll_at_100)], 8);
        if let Some(seconds) = once {
            env.takes.push(crate::lab::experiments::idle::fixture_take(Poll, 200, seconds, 0));
        }
        envelope::write(&dir, &env).unwrap();
        Dir(dir)
    }

    #[test]
    fn a_figure_measured_once_is_judged_by_its_kinds_spread() {
        let (a, b) = (folder_with_once("once-a", 0.5, Some(0.5)), folder_with_once("once-b", 0.5, Some(0.51)));
        let w = write(&a.0, &b.0, None).unwrap();
        assert!(w.summary.contains("show no change within noise, 0 changed, 0 have too few"), "{}", w.summary);
        // Its seconds, server CPU and p99 latency.
        assert!(w.summary.contains("3 of the figures had fewer than 4 samples a side"), "{}", w.summary);
        let html = std::fs::read_to_string(&w.path).unwrap();
        assert!(html.contains("no change within noise (interval from its kind&#x27;s spread)"), "{html}");
        // The repeated figures vary by 0.2%: a 30% step on one take is a change.
        let c = folder_with_once("once-c", 0.5, Some(0.65));
        let w = write(&a.0, &c.0, None).unwrap();
        assert!(w.summary.contains("2 changed"), "{}", w.summary);
        assert!(w.summary.contains("poll, Z = 200: seconds"), "{}", w.summary);
        assert!(w.summary.contains("B higher by 30.0% [+2"), "{}", w.summary);
        assert!(w.summary.contains("(worse; interval from its kind's spread)"), "{}", w.summary);
    }

    fn figure(name: &str, samples: &[f64], reference: bool) -> Figure {
        Figure {
            name: name.into(),
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
        let slower = |f: f64| base.map(|x| x * f);
        let a = figure("iomux: requests/s", &base, false);
        let drift = crate::lab::harness::stats::Estimate::of(&[0.87, 0.88, 0.9, 0.89, 0.86, 0.88]);
        let compare = |b: &Figure| {
            let change = Change::between(&a.samples, &b.samples);
            let c = Compared { experiment: "http", a: &a, b, change, drift };
            (c.same(), c.verdict())
        };
        // Everything 12% slower, the references too: the machine.
        let (same, verdict) = compare(&figure("iomux: requests/s", &slower(0.88), false));
        assert_eq!(same, Some(true), "{verdict}");
        assert!(verdict.starts_with("no change within noise beside the machine's drift"), "{verdict}");
        // 30% slower where the references lost 12%: a change, both given.
        let (same, verdict) = compare(&figure("iomux: requests/s", &slower(0.7), false));
        assert_eq!(same, Some(false), "{verdict}");
        assert!(verdict.contains("B lower by 30.0%") && verdict.contains("beside the machine's drift"), "{verdict}");
        // Without a drift, 12% is a change.
        let b = figure("iomux: requests/s", &slower(0.88), false);
        let c =
            Compared { experiment: "idle", a: &a, b: &b, change: Change::between(&a.samples, &b.samples), drift: None };
        assert_eq!(c.same(), Some(false), "{}", c.verdict());
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
        assert!(w.summary.contains("2 changed"), "{}", w.summary);
        assert!(w.summary.contains("idle: poll, Z = 100: seconds"), "{}", w.summary);
        assert!(w.summary.contains("B higher by 30.0% [+2"), "{}", w.summary);
        assert!(w.summary.contains("(worse)"), "{}", w.summary);
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
