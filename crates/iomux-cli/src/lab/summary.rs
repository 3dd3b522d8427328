//! The verdicts, first: one line per claim, read back from a results
//! folder's JSON (so `iomux report` gives the same summary as the run that
//! wrote it, older folders included), for the terminal and for the top of
//! `report.html`, each claim with a small plot of its margin.

use super::noise::Noise;
use super::report::{escape, ORDER};
use super::table::{thousands, Table};
use super::Verdict;
use serde::Deserialize;
use std::path::Path;

/// One check as an experiment's JSON holds it. Folders written before
/// verdicts existed lack the last four fields: the verdict then follows
/// `met`, and the claim counts as iomux's.
#[derive(Clone, Debug, Deserialize)]
pub struct Claim {
    pub claim: String,
    pub value: Option<f64>,
    #[serde(default)]
    pub needed: String,
    #[serde(default)]
    pub threshold: f64,
    pub met: Option<bool>,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub statement: String,
    #[serde(default)]
    pub verdict: Option<Verdict>,
    #[serde(default)]
    pub why: Option<String>,
}

impl Claim {
    /// The recorded verdict. Results older than the noise guard have none,
    /// and no noise reading either: a measured claim of theirs is
    /// inconclusive, since "does not hold" needs a machine known quiet.
    pub fn verdict(&self) -> Verdict {
        self.verdict.unwrap_or(match self.met {
            Some(_) => Verdict::Inconclusive,
            None => Verdict::NotMeasurable,
        })
    }

    pub fn is_documents(&self) -> bool {
        self.source.as_deref() == Some("documents")
    }

    /// What the summary calls it: the documents' words, or the ratio.
    pub fn title(&self) -> &str {
        if self.statement.is_empty() {
            &self.claim
        } else {
            &self.statement
        }
    }

    /// Why the verdict is what it is.
    pub fn why(&self) -> String {
        match (&self.why, self.verdict, self.met) {
            (Some(why), _, _) => why.clone(),
            (None, None, Some(met)) => format!(
                "noise not recorded (results older than the noise guard); the value would {} the claim",
                if met { "support" } else { "not support" }
            ),
            (None, _, _) => self.detail.clone(),
        }
    }

    /// "1.010 (needed >= 0.8)", or "-".
    pub fn measured(&self) -> String {
        match self.value {
            Some(v) => format!("{} (needed {} {})", number(v), self.needed, self.threshold),
            None => "-".into(),
        }
    }

    /// How far the value is on the claim's side of the threshold: above 1
    /// when it holds, whichever way the claim compares.
    pub fn margin(&self) -> Option<f64> {
        let v = self.value?;
        let m = match self.needed.as_str() {
            ">=" => v / self.threshold,
            "<=" => self.threshold / v,
            _ => return None,
        };
        // A value of 0 against "<=" is as far inside as can be.
        Some(if m.is_nan() { 1.0 } else { m })
    }
}

/// A ratio as the checks tables print it.
pub fn number(v: f64) -> String {
    if v.abs() >= 100.0 {
        thousands(v)
    } else {
        format!("{v:.3}")
    }
}

/// One experiment's verdicts and the machine's noise while it ran.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub name: String,
    pub noise: Option<Noise>,
    pub claims: Vec<Claim>,
}

/// "E1".."E5" as the documents number them.
pub fn label(name: &str) -> &str {
    match name {
        "syscall-rate" => "E1",
        "idle" => "E2",
        "sink" => "E3",
        "echo" => "E4",
        "peers" => "E5",
        "uring-features" => "io_uring",
        "http" => "E6",
        other => other,
    }
}

/// The experiments in `dir` that wrote JSON with checks, in report order.
/// A file that does not parse is left out (the report still shows its
/// Markdown).
pub fn load(dir: &Path) -> Vec<Experiment> {
    ORDER
        .iter()
        .filter_map(|name| {
            let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).ok()?;
            let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
            let claims = serde_json::from_value(doc.get("checks")?.clone()).ok()?;
            let noise = doc.get("noise").and_then(|n| serde_json::from_value(n.clone()).ok());
            Some(Experiment { name: name.to_string(), noise, claims })
        })
        .collect()
}

fn counts<'a>(claims: impl Iterator<Item = &'a Claim>) -> String {
    let mut n = [0usize; 4];
    for c in claims {
        n[c.verdict() as usize] += 1;
    }
    let words = ["hold", "do not hold", "inconclusive", "not measurable"];
    let parts: Vec<String> = n.iter().zip(words).filter(|(k, _)| **k > 0).map(|(k, w)| format!("{k} {w}")).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// The experiments measured while the machine was busy, as one sentence.
fn busy_sentence(experiments: &[Experiment]) -> Option<String> {
    let busy: Vec<String> = experiments
        .iter()
        .filter_map(|e| {
            let n = e.noise.as_ref().filter(|n| n.busy)?;
            Some(format!(
                "{} ({:.1}% of a CPU on average, {:.0}% in the busiest second)",
                label(&e.name),
                n.other_cpu_share * 100.0,
                n.peak_other_cpu_share * 100.0
            ))
        })
        .collect();
    (!busy.is_empty()).then(|| {
        format!(
            "The machine was busy during {}: other processes' CPU use makes those verdicts inconclusive. \
             Re-run on a quiet machine for a verdict.",
            busy.join(", ")
        )
    })
}

/// The verdicts for a terminal: the documents' claims, then iomux's goals.
pub fn terminal(experiments: &[Experiment]) -> String {
    if experiments.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n==== Verdicts on this machine ====\n");
    for documents in [true, false] {
        let mut t = Table::new([
            if documents { "the documents' claims" } else { "iomux's own goals" },
            "",
            "verdict",
            "measured",
            "why",
        ]);
        let mut any = false;
        for e in experiments {
            for c in e.claims.iter().filter(|c| c.is_documents() == documents) {
                any = true;
                t.row([
                    c.title().to_string(),
                    label(&e.name).into(),
                    c.verdict().as_str().into(),
                    c.measured(),
                    c.why(),
                ]);
            }
        }
        if any {
            out += &t.render();
            out += "\n";
        }
    }
    let all = || experiments.iter().flat_map(|e| &e.claims);
    out += &format!(
        "The documents' claims: {}. iomux's goals: {}.\n",
        counts(all().filter(|c| c.is_documents())),
        counts(all().filter(|c| !c.is_documents()))
    );
    if let Some(s) = busy_sentence(experiments) {
        out += &s;
        out += "\n";
    }
    out
}

const GAUGE_W: f64 = 150.0;
const GAUGE_H: f64 = 18.0;
/// The gauge spans margins from 1/SPAN to SPAN, log scale.
const SPAN: f64 = 10.0;

/// (class, symbol) of a verdict: shape as well as colour, so it reads
/// without colour too.
fn badge(v: Verdict) -> (&'static str, &'static str) {
    match v {
        Verdict::Holds => ("holds", "✓"),
        Verdict::DoesNotHold => ("fails", "✗"),
        Verdict::Inconclusive => ("unsure", "?"),
        Verdict::NotMeasurable => ("none", "–"),
    }
}

/// A small plot of one claim: where its value sits against the threshold
/// (the middle line), on a log scale of the margin; the side where the
/// claim holds is green.
pub fn gauge(c: &Claim) -> String {
    let mid = GAUGE_W / 2.0;
    let mut svg = format!(
        "<svg class=\"gauge\" viewBox=\"0 0 {GAUGE_W} {GAUGE_H}\" width=\"{GAUGE_W}\" height=\"{GAUGE_H}\" \
         role=\"img\" aria-label=\"{}\"><title>{}</title>\
         <rect x=\"0\" y=\"5\" width=\"{mid}\" height=\"8\" fill=\"#f6d5d5\"/>\
         <rect x=\"{mid}\" y=\"5\" width=\"{mid}\" height=\"8\" fill=\"#d3ecd9\"/>\
         <line x1=\"{mid}\" y1=\"1\" x2=\"{mid}\" y2=\"17\" stroke=\"#333\" stroke-width=\"1.5\"/>",
        escape(&c.measured()),
        escape(&c.measured())
    );
    if let Some(m) = c.margin() {
        let t = (m.clamp(1.0 / SPAN, SPAN).log10() / SPAN.log10() + 1.0) / 2.0;
        let x = (t * (GAUGE_W - 10.0) + 5.0).clamp(5.0, GAUGE_W - 5.0);
        svg += &format!(
            "<circle class=\"{}\" cx=\"{x:.1}\" cy=\"9\" r=\"5\" stroke=\"#fff\" stroke-width=\"1\"/>",
            badge(c.verdict()).0
        );
    }
    svg + "</svg>"
}

fn claim_rows(e: &Experiment, claims: &[&Claim]) -> String {
    let mut html = String::new();
    for c in claims {
        let (class, symbol) = badge(c.verdict());
        html += &format!(
            "<tr><td><a href=\"#{}\">{}</a></td><td>{}</td><td><span class=\"badge {class}\">{symbol} {}</span></td>\
             <td>{}</td><td>{}</td><td class=\"why\">{}</td></tr>\n",
            e.name,
            label(&e.name),
            escape(c.title()),
            c.verdict().as_str(),
            escape(&c.measured()),
            gauge(c),
            escape(&c.why())
        );
    }
    html
}

const HEAD: &str = "<tr><th></th><th>claim</th><th>verdict</th><th>measured</th>\
                    <th title=\"where the value sits against what the claim needs (the middle line); \
                    log scale, 10x either way\">margin</th><th>why</th></tr>\n";

/// The `<section id="verdicts">` at the top of the report: the documents'
/// claims one per line, iomux's goals one line per experiment that opens
/// to its claims, and the noise; `figure` (the headline plot) beside it.
pub fn html(experiments: &[Experiment], figure: Option<&str>) -> String {
    let mut html = String::from("<section id=\"verdicts\">\n<h2>Verdicts on this machine</h2>\n");
    if experiments.is_empty() {
        return html + "<p>No experiment in this folder recorded checks (JSON with \"checks\").</p>\n</section>\n";
    }
    html += "<div class=\"top\"><div class=\"claims\">\n";
    let noise = match busy_sentence(experiments) {
        Some(s) => format!("<p class=\"busy\">{}</p>\n", escape(&s)),
        None => {
            let readings: Vec<&Noise> = experiments.iter().filter_map(|e| e.noise.as_ref()).collect();
            let most = |f: fn(&Noise) -> f64| readings.iter().map(|n| f(n)).fold(0.0, f64::max);
            if readings.is_empty() {
                "<p>Machine noise was not recorded in this folder.</p>\n".into()
            } else {
                format!(
                    "<p class=\"quiet\">The machine was quiet: other processes used at most {:.0}% of a CPU over \
                     an experiment, {:.0}% in its busiest second.</p>\n",
                    most(|n| n.other_cpu_share) * 100.0,
                    most(|n| n.peak_other_cpu_share) * 100.0
                )
            }
        }
    };
    // Whether to trust the verdicts comes before them.
    html += &noise;

    let documents: Vec<(&Experiment, Vec<&Claim>)> =
        experiments.iter().map(|e| (e, e.claims.iter().filter(|c| c.is_documents()).collect())).collect();
    if documents.iter().any(|(_, c)| !c.is_empty()) {
        html += "<h3>The documents' claims</h3>\n<div class=\"scroll\"><table class=\"verdicts\">\n";
        html += HEAD;
        for (e, claims) in &documents {
            html += &claim_rows(e, claims);
        }
        html += "</table></div>\n";
    }
    html += "<h3>iomux's own goals</h3>\n";
    for e in experiments {
        let goals: Vec<&Claim> = e.claims.iter().filter(|c| !c.is_documents()).collect();
        if goals.is_empty() {
            continue;
        }
        let worst = goals.iter().map(|c| c.verdict()).min_by_key(|v| match v {
            Verdict::DoesNotHold => 0,
            Verdict::Inconclusive => 1,
            Verdict::NotMeasurable => 2,
            Verdict::Holds => 3,
        });
        let (class, symbol) = badge(worst.unwrap_or(Verdict::NotMeasurable));
        html += &format!(
            "<details><summary><span class=\"badge {class}\">{symbol}</span> <b>{}</b>: {}</summary>\n\
             <div class=\"scroll\"><table class=\"verdicts\">\n{HEAD}{}</table></div></details>\n",
            label(&e.name),
            counts(goals.iter().copied()),
            claim_rows(e, &goals)
        );
    }
    html += "</div>\n";
    if let Some(f) = figure {
        html += f;
    }
    html + "</div>\n</section>\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::noise::MEAN_THRESHOLD;

    fn claim(json: &str) -> Claim {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn margins_point_to_the_side_where_the_claim_holds() {
        let at_least = claim(r#"{"claim":"a","value":2.0,"needed":">=","threshold":1.0,"met":true}"#);
        let at_most = claim(r#"{"claim":"b","value":2.0,"needed":"<=","threshold":1.0,"met":false}"#);
        assert_eq!(at_least.margin(), Some(2.0));
        assert_eq!(at_most.margin(), Some(0.5));
        let zero = claim(r#"{"claim":"c","value":0.0,"needed":"<=","threshold":0.1,"met":true}"#);
        assert_eq!(zero.margin(), Some(f64::INFINITY));
        // The dot sits right of the middle line when it holds.
        let cx = |c: &Claim| -> f64 {
            let g = gauge(c);
            let i = g.find("cx=\"").unwrap() + 4;
            g[i..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(cx(&at_least) > GAUGE_W / 2.0 && cx(&at_most) < GAUGE_W / 2.0);
        assert_eq!(cx(&zero), GAUGE_W - 5.0);
    }

    #[test]
    fn older_results_take_their_verdict_from_met() {
        let old = claim(r#"{"claim":"x","value":0.5,"needed":"<=","threshold":1.0,"met":true,"detail":"d"}"#);
        assert_eq!((old.verdict(), old.is_documents()), (Verdict::Inconclusive, false));
        assert!(old.why().starts_with("noise not recorded"), "{}", old.why());
        let new = claim(
            r#"{"claim":"x","value":0.5,"needed":"<=","threshold":1.0,"met":false,"detail":"d",
                "source":"documents","statement":"s","verdict":"inconclusive","why":"busy"}"#,
        );
        assert_eq!(
            (new.verdict(), new.is_documents(), new.title(), new.why()),
            (Verdict::Inconclusive, true, "s", "busy".to_string())
        );
    }

    #[test]
    fn the_summary_puts_documents_first_and_names_busy_experiments() {
        let e = |name: &str, busy: bool, claims: &str| Experiment {
            name: name.into(),
            noise: Some(Noise {
                seconds: 1.0,
                other_cpu_share: if busy { 0.85 } else { 0.01 },
                steal_share: 0.0,
                peak_other_cpu_share: 0.9,
                peak_at_s: 1.0,
                own_cpu_share: 1.0,
                mean_threshold: MEAN_THRESHOLD,
                peak_threshold: 0.3,
                busy,
            }),
            claims: serde_json::from_str(claims).unwrap(),
        };
        let runs = [
            e(
                "syscall-rate",
                false,
                r#"[{"claim":"lib/raw","value":1.0,"needed":">=","threshold":0.95,"met":true,"verdict":"holds"},
                {"claim":"flat","value":1.0,"needed":">=","threshold":0.8,"met":true,"source":"documents","statement":"epoll flat","verdict":"holds"}]"#,
            ),
            e(
                "idle",
                true,
                r#"[{"claim":"poll","value":2.0,"needed":">=","threshold":5.0,"met":false,"source":"documents","statement":"poll grows","verdict":"inconclusive","why":"busy"}]"#,
            ),
        ];
        let text = terminal(&runs);
        let (docs, goals) = (text.find("epoll flat").unwrap(), text.find("lib/raw").unwrap());
        assert!(docs < goals, "{text}");
        assert!(text.contains("busy during E2 (85.0% of a CPU on average, 90% in the busiest second)"), "{text}");
        assert!(text.contains("The documents' claims: 1 hold, 1 inconclusive. iomux's goals: 1 hold."), "{text}");
        let page = html(&runs, Some("<figure>F</figure>"));
        assert!(page.starts_with("<section id=\"verdicts\">"));
        assert!(page.find("poll grows").unwrap() < page.find("<details>").unwrap());
        assert!(page.contains("class=\"badge unsure\">? inconclusive"), "{page}");
        assert!(page.contains("<figure>F</figure>"));
    }
}
