//! An experiment's page in Markdown, also what the terminal shows as it
//! finishes.

use crate::lab::harness::claim::{number, Claim, Verdict};
use crate::lab::harness::envelope::NoiseSummary;
use crate::lab::harness::experiment::Entry;
use crate::lab::harness::stats::Estimate;
use crate::lab::render::table::Table;
use crate::lab::render::view::{TableView, View};
use crate::lab::rig::machine::Machine;

/// "0.512 ±1.2%": a median and its interval's half width, for table cells.
pub fn cell(e: Option<Estimate>) -> String {
    match e {
        None => "-".into(),
        Some(e) if e.n < 2 => number(e.median),
        Some(e) => format!("{} ±{:.1}%", number(e.median), e.relative_half_width() * 100.0),
    }
}

fn table(t: &TableView) -> String {
    let mut out = Table::new(t.header.iter().cloned());
    for row in &t.rows {
        out.row(row.iter().cloned());
    }
    out.render()
}

/// The claims' table and the count of verdicts.
pub fn claims(claims: &[Claim]) -> String {
    let mut t = Table::new(["claim", "measured: median [95% interval]", "needed", "verdict", "why"]);
    for c in claims {
        let measured =
            c.estimate.map_or("-".into(), |e| format!("{} [{}, {}]", number(e.median), number(e.lo), number(e.hi)));
        t.row([c.quantity.clone(), measured, c.needed.describe(), c.verdict.as_str().into(), c.why.clone()]);
    }
    let count = |v: Verdict| claims.iter().filter(|c| c.verdict == v).count();
    format!(
        "{}\nVerdicts: {} hold, {} do not hold, {} inconclusive, {} not measurable.\n",
        t.render(),
        count(Verdict::Holds),
        count(Verdict::DoesNotHold),
        count(Verdict::Inconclusive),
        count(Verdict::NotMeasurable)
    )
}

/// The whole page.
pub fn page(
    entry: &Entry,
    machine: &Machine,
    published: &str,
    view: &View,
    claims_of_run: &[Claim],
    noise: &NoiseSummary,
) -> String {
    let mut md = format!("## {} {}: {}\n\nMachine: {}.\n\n", entry.label, entry.name, entry.title, machine.summary());
    for p in &view.intro {
        md += p;
        md += "\n\n";
    }
    if !published.is_empty() {
        md += &format!("Published: {published}\n\n");
    }
    for t in &view.tables {
        if !t.caption.is_empty() {
            md += &t.caption;
            md += "\n\n";
        }
        md += &table(t);
        md += "\n";
    }
    for (i, n) in view.notes.iter().enumerate() {
        md += &format!("[{}] {n}  \n", i + 1);
    }
    if !view.notes.is_empty() {
        md += "\n";
    }
    md += &noise.sentence();
    md += "\n\n";
    md += &claims(claims_of_run);
    md
}
