//! `iomux report A B`: two results folders side by side (two machines, two
//! kernels, before and after a change): the machines, each side's
//! verdicts, and every figure's change B/A with its 95% interval, "no
//! change within noise" where the interval says so.

use super::harness::claim::{number, Claim};
use super::harness::envelope::Figure;
use super::harness::experiment::TableView;
use super::harness::stats::{Change, NOISE_THRESHOLD};
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
}

impl Compared<'_> {
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
        if c.within_noise() {
            return "no change within noise".into();
        }
        let pct = |r: f64| (r - 1.0) * 100.0;
        let better = (c.ratio > 1.0) == self.a.higher_is_better;
        format!(
            "B {} by {:.1}% [{:+.1}%, {:+.1}%] ({})",
            if c.ratio > 1.0 { "higher" } else { "lower" },
            pct(c.ratio).abs(),
            pct(c.lo),
            pct(c.hi),
            if better { "better" } else { "worse" }
        )
    }
}

/// Every figure both folders hold, experiment by experiment.
pub fn changes<'a>(fa: &'a Folder, fb: &'a Folder) -> Vec<Compared<'a>> {
    let mut out = Vec::new();
    for ra in &fa.results {
        let Some(rb) = fb.get(ra.entry.name) else { continue };
        for a in &ra.header.figures {
            if let Some(b) = rb.header.figures.iter().find(|f| f.name == a.name) {
                let change = Change::between(&a.samples, &b.samples);
                out.push(Compared { experiment: ra.entry.name, a, b, change });
            }
        }
    }
    out
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
    let count = |keep: fn(&Change) -> bool| compared.iter().filter(|c| c.change.as_ref().is_some_and(keep)).count();
    let same = count(|x| x.told() && x.within_noise());
    let changed = count(|x| x.told() && !x.within_noise());
    let untold = count(|x| !x.told());
    let verdict_line = format!(
        "{} figures compared: {same} show no change within noise, {changed} changed, {untold} have too few samples \
         on a side to tell ({} a side give a 95% interval).",
        same + changed + untold,
        crate::lab::harness::stats::MIN_CHANGE_SAMPLES
    );
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
    summary += &format!("\n{verdict_line}\n");
    let changed: Vec<&Compared> =
        compared.iter().filter(|c| c.change.is_some_and(|x| x.told() && !x.within_noise())).collect();
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
        let dir = std::env::temp_dir().join(format!("iomux-compare-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let env = fixture(&[(Epoll, 0, 0.4), (Epoll, 100, 0.4), (Poll, 0, 0.4), (Poll, 100, poll_at_100)], 8);
        envelope::write(&dir, &env).unwrap();
        Dir(dir)
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
