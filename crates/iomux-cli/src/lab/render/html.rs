//! `report.html` and the comparison page, from templates (minijinja,
//! HTML-escaped by default) filled with typed results.

use crate::lab::harness::claim::{Claim, Source, Verdict};
use crate::lab::harness::experiment::Entry;
use crate::lab::report::results::{Folder, Result as Found};
use crate::CliResult;
use anyhow::{anyhow, Context as _};
use minijinja::Environment;
use serde::Serialize;
use std::path::PathBuf;

const STYLE: &str = include_str!("templates/style.css");

fn environment() -> CliResult<Environment<'static>> {
    let mut env = Environment::new();
    for (name, text) in [
        ("macros.html", include_str!("templates/macros.html")),
        ("report.html", include_str!("templates/report.html")),
        ("compare.html", include_str!("templates/compare.html")),
    ] {
        env.add_template(name, text).with_context(|| format!("template {name}"))?;
    }
    Ok(env)
}

/// Fills template `name` with `context` (plus the shared style).
pub fn render(name: &str, context: impl Serialize) -> CliResult<String> {
    let env = environment()?;
    let template = env.get_template(name).with_context(|| format!("template {name}"))?;
    let ctx = minijinja::context! { style => STYLE, ..minijinja::Value::from_serialize(&context) };
    template.render(ctx).map_err(|e| anyhow!("rendering {name}: {e:#}"))
}

/// (class, symbol) of a verdict: shape as well as colour, so it reads
/// without colour too.
pub fn badge(v: Verdict) -> (&'static str, &'static str) {
    match v {
        Verdict::Holds => ("holds", "✓"),
        Verdict::DoesNotHold => ("fails", "✗"),
        Verdict::Inconclusive => ("unsure", "?"),
        Verdict::NotMeasurable => ("none", "–"),
    }
}

const GAUGE_W: f64 = 150.0;
const GAUGE_H: f64 = 18.0;
/// The gauge spans margins from 1/SPAN to SPAN, log scale.
const SPAN: f64 = 10.0;

/// Where a margin sits on the gauge, in pixels.
fn gauge_x(margin: f64) -> f64 {
    let m = if margin.is_nan() { 1.0 } else { margin };
    let t = (m.clamp(1.0 / SPAN, SPAN).log10() / SPAN.log10() + 1.0) / 2.0;
    (t * (GAUGE_W - 10.0) + 5.0).clamp(5.0, GAUGE_W - 5.0)
}

/// A small plot of one claim: its median (dot) and interval (bar) against
/// the threshold (the middle line), on a log scale of the margin; the side
/// where the claim holds is green.
pub fn gauge(c: &Claim) -> String {
    let mid = GAUGE_W / 2.0;
    let mut svg = format!(
        "<svg class=\"gauge\" viewBox=\"0 0 {GAUGE_W} {GAUGE_H}\" width=\"{GAUGE_W}\" height=\"{GAUGE_H}\" \
         role=\"img\" aria-label=\"{m}\"><title>{m}</title>\
         <rect x=\"0\" y=\"5\" width=\"{mid}\" height=\"8\" fill=\"#f6d5d5\"/>\
         <rect x=\"{mid}\" y=\"5\" width=\"{mid}\" height=\"8\" fill=\"#d3ecd9\"/>\
         <line x1=\"{mid}\" y1=\"1\" x2=\"{mid}\" y2=\"17\" stroke=\"#333\" stroke-width=\"1.5\"/>",
        m = escape(&c.measured()),
    );
    if let Some(e) = c.estimate {
        let (a, b) = (gauge_x(c.needed.margin(e.lo)), gauge_x(c.needed.margin(e.hi)));
        let (x0, x1) = (a.min(b), a.max(b));
        if x1 - x0 > 0.5 {
            svg += &format!("<rect class=\"interval\" x=\"{x0:.1}\" y=\"7.5\" width=\"{:.1}\" height=\"3\"/>", x1 - x0);
        }
        svg += &format!(
            "<circle class=\"{}\" cx=\"{:.1}\" cy=\"9\" r=\"5\" stroke=\"#fff\" stroke-width=\"1\"/>",
            badge(c.verdict).0,
            gauge_x(c.needed.margin(e.median))
        );
    }
    svg + "</svg>"
}

/// Text made safe inside HTML, attribute values included (for the gauge,
/// built outside the templates).
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// One claim as the verdict tables show it.
#[derive(Serialize)]
pub struct ClaimRow {
    anchor: String,
    label: String,
    title: String,
    verdict: &'static str,
    class: &'static str,
    symbol: &'static str,
    measured: String,
    gauge: String,
    why: String,
}

impl ClaimRow {
    pub fn of(entry: &Entry, c: &Claim) -> ClaimRow {
        let (class, symbol) = badge(c.verdict);
        ClaimRow {
            anchor: entry.name.into(),
            label: entry.label.into(),
            title: c.title().into(),
            verdict: c.verdict.as_str(),
            class,
            symbol,
            measured: c.measured(),
            gauge: gauge(c),
            why: c.why.clone(),
        }
    }
}

/// "2 hold, 1 inconclusive", or "none".
pub fn counts<'a>(claims: impl Iterator<Item = &'a Claim>) -> String {
    let mut n = [0usize; 4];
    for c in claims {
        n[Verdict::ALL.iter().position(|v| *v == c.verdict).unwrap_or(3)] += 1;
    }
    let words = ["hold", "do not hold", "inconclusive", "not measurable"];
    let parts: Vec<String> = n.iter().zip(words).filter(|(k, _)| **k > 0).map(|(k, w)| format!("{k} {w}")).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

#[derive(Serialize)]
struct Goals {
    label: &'static str,
    /// Beside the label: two experiments may share one (E7's RESP and pub/sub).
    name: &'static str,
    class: &'static str,
    symbol: &'static str,
    counts: String,
    claims: Vec<ClaimRow>,
}

#[derive(Serialize)]
struct Section {
    name: &'static str,
    label: &'static str,
    title: &'static str,
    intro: Vec<String>,
    published: String,
    tables: Vec<crate::lab::render::view::TableView>,
    notes: Vec<String>,
    svg: Option<String>,
    older: bool,
    schema: u32,
    noise: String,
    claims: Vec<ClaimRow>,
}

#[derive(Serialize)]
struct Noise {
    class: &'static str,
    text: String,
}

#[derive(Serialize)]
struct Headline {
    svg: String,
    label: &'static str,
    name: &'static str,
}

fn section(r: &Found) -> Section {
    let view = r.view.clone().unwrap_or_default();
    Section {
        name: r.entry.name,
        label: r.entry.label,
        title: r.entry.title,
        intro: view.intro,
        published: r.header.published.clone(),
        tables: view.tables,
        notes: view.notes,
        svg: view.svg,
        older: r.older,
        schema: r.header.schema,
        noise: r.header.noise.as_ref().map_or_else(
            || crate::lab::rig::noise::Noise::markdown(r.header.legacy_noise.as_ref()).trim().replace("**", ""),
            |n| n.sentence(),
        ),
        claims: r.header.claims.iter().map(|c| ClaimRow::of(r.entry, c)).collect(),
    }
}

/// An experiment that failed in the run, with its error.
#[derive(Serialize)]
struct Failed {
    label: &'static str,
    name: &'static str,
    error: String,
}

/// Writes `dir/report.html` from the experiments' JSON in `dir`.
pub fn write_report(folder: &Folder) -> CliResult<PathBuf> {
    let documents: Vec<ClaimRow> = folder
        .results
        .iter()
        .flat_map(|r| r.header.claims.iter().filter(|c| c.is_documents()).map(|c| ClaimRow::of(r.entry, c)))
        .collect();
    let machine_pairs: Vec<_> = folder
        .results
        .iter()
        .flat_map(|r| r.header.claims.iter().filter(|c| c.source == Source::Machine).map(move |c| (r.entry, c)))
        .collect();
    let machine_counts = counts(machine_pairs.iter().map(|(_, c)| *c));
    let machine: Vec<ClaimRow> = machine_pairs.iter().map(|(e, c)| ClaimRow::of(e, c)).collect();
    let goals: Vec<Goals> = folder
        .results
        .iter()
        .filter_map(|r| {
            let goals: Vec<&Claim> = r.header.claims.iter().filter(|c| c.is_goal()).collect();
            let worst = goals.iter().map(|c| c.verdict).min_by_key(|v| match v {
                Verdict::DoesNotHold => 0,
                Verdict::Inconclusive => 1,
                Verdict::NotMeasurable => 2,
                Verdict::Holds => 3,
            })?;
            let (class, symbol) = badge(worst);
            Some(Goals {
                label: r.entry.label,
                name: r.entry.name,
                class,
                symbol,
                counts: counts(goals.iter().copied()),
                claims: goals.iter().map(|c| ClaimRow::of(r.entry, c)).collect(),
            })
        })
        .collect();
    let (busy, text) = folder.noise_line();
    let headline = folder.results.iter().find_map(|r| {
        let svg = r.view.as_ref()?.svg.clone()?;
        Some(Headline { svg, label: r.entry.label, name: r.entry.name })
    });
    let sections: Vec<Section> = folder.results.iter().map(section).collect();
    let html = render(
        "report.html",
        minijinja::context! {
            machine => folder.machine().map(|m| m.summary()),
            noise => Noise { class: if busy { "busy" } else { "quiet" }, text },
            documents => documents,
            goals => goals,
            machine_claims => machine,
            machine_counts => machine_counts,
            headline => headline,
            sections => sections,
            failed => folder.failed.iter().map(|f| Failed { label: f.entry.label, name: f.entry.name, error: f.error.clone() }).collect::<Vec<_>>(),
        },
    )?;
    let path = folder.dir.join("report.html");
    std::fs::write(&path, html).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::experiments::idle::fixture;
    use crate::lab::harness::envelope;
    use crate::lab::harness::stats::{Estimate, Needed};
    use iomux::Backend::{Epoll, Poll};

    fn claim(needed: Needed, lo: f64, median: f64, hi: f64, verdict: Verdict) -> Claim {
        Claim {
            quantity: "q".into(),
            statement: String::new(),
            source: crate::lab::harness::claim::Source::Iomux,
            needed,
            estimate: Some(Estimate { median, lo, hi, n: 8, confidence: 0.99 }),
            excluded: 0,
            verdict,
            why: "w".into(),
            undecided: None,
        }
    }

    /// The dot's x and the interval bar's extent.
    fn drawn(svg: &str) -> (f64, Option<(f64, f64)>) {
        let num = |key: &str, from: &str| -> Option<f64> {
            let i = from.find(key)? + key.len();
            from[i..].split('"').next()?.parse().ok()
        };
        let bar = svg.find("class=\"interval\"").map(|i| {
            let x = num("x=\"", &svg[i..]).unwrap();
            (x, x + num("width=\"", &svg[i..]).unwrap())
        });
        (num("cx=\"", svg).unwrap(), bar)
    }

    #[test]
    fn gauges_put_the_median_and_interval_on_the_claims_side() {
        let mid = GAUGE_W / 2.0;
        let (x, bar) = drawn(&gauge(&claim(Needed::AtLeast(1.0), 1.5, 2.0, 2.5, Verdict::Holds)));
        let (b0, b1) = bar.unwrap();
        assert!(x > mid && b0 > mid && b0 < x && x < b1, "{x} {bar:?}");
        let (x, _) = drawn(&gauge(&claim(Needed::AtMost(1.0), 1.5, 2.0, 2.5, Verdict::DoesNotHold)));
        assert!(x < mid);
        // Straddling: the bar crosses the middle line.
        let (_, bar) = drawn(&gauge(&claim(Needed::AtLeast(1.0), 0.9, 1.0, 1.1, Verdict::Inconclusive)));
        let (b0, b1) = bar.unwrap();
        assert!(b0 < mid && mid < b1);
    }

    #[test]
    fn the_report_is_drawn_from_json_alone_and_opens_with_the_verdicts() {
        let dir = std::env::temp_dir().join(format!("iomux-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut env = fixture(&[(Epoll, 0, 0.4), (Epoll, 100, 0.41), (Poll, 0, 0.4), (Poll, 100, 3.0)], 6);
        // One of iomux's goals and one figure of what the machine allows.
        env.claims.push(claim(Needed::AtLeast(1.0), 1.5, 2.0, 2.5, Verdict::Holds));
        let machine = crate::lab::harness::claim::Source::Machine;
        env.claims.push(Claim { source: machine, ..claim(Needed::AtLeast(1.0), 0.5, 0.6, 0.7, Verdict::DoesNotHold) });
        envelope::write(&dir, &env).unwrap();
        // An older experiment's file: verdicts shown, tables left in its Markdown.
        std::fs::write(
            dir.join("sink.json"),
            r#"{"experiment": "sink", "checks": [{"claim": "old <b>", "value": 0.8, "needed": "<=",
                "threshold": 1.0, "met": true, "verdict": "holds", "why": "w"}]}"#,
        )
        .unwrap();
        let html = std::fs::read_to_string(write_report(&Folder::read(&dir).unwrap()).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("no {s} in {html}"));
        assert!(at("<section id=\"verdicts\">") < at("<section id=\"idle\">"));
        assert!(at("epoll&#x27;s time stays flat") < at("<section id=\"idle\">"), "documents' claims first");
        assert!(html.contains("class=\"badge holds\">✓ holds"), "{html}");
        // Tables from the envelope: 40,000 round trips' seconds with intervals.
        assert!(html.contains("<td>0.401 ±0.2%</td>") || html.contains("<td>0.400 ±0.2%</td>"), "{html}");
        assert!(html.contains("<figure class=\"headline\"><svg"));
        // Goals by experiment, named; what the machine allows folded, counted.
        assert!(html.contains("<div class=\"goals\"><details><summary>") && html.contains("<b>E2 idle</b>: 1 hold"));
        assert!(html.contains("<details><summary>1 do not hold: references"), "{html}");
        // Escaped, never injected.
        assert!(html.contains("old &lt;b&gt;") && !html.contains("old <b>"));
        assert!(html.contains("Results written by an older iomux (schema 1)"));
    }
}
