//! The verdicts for a terminal: the documents' claims, iomux's goals, what
//! the machine allows, then how the machine's noise bore on them. The last thing a bench
//! prints, and what `iomux report DIR` prints.

use crate::lab::harness::claim::Source;
use crate::lab::render::html::counts;
use crate::lab::render::table::Table;
use crate::lab::report::results::Folder;

pub fn verdicts(folder: &Folder) -> String {
    let mut out = String::from("\n==== Verdicts on this machine ====\n");
    for source in [Source::Documents, Source::Iomux, Source::Machine] {
        let mut t = Table::new([
            match source {
                Source::Documents => "the documents' claims",
                Source::Iomux => "iomux's own goals",
                Source::Machine => "what this machine allows",
            },
            "",
            "verdict",
            "measured: median [95% interval]",
            "why",
        ]);
        let mut any = false;
        for r in &folder.results {
            for c in r.header.claims.iter().filter(|c| c.source == source) {
                any = true;
                t.row([
                    c.title().to_string(),
                    r.entry.label.into(),
                    c.verdict.as_str().into(),
                    c.measured(),
                    c.why.clone(),
                ]);
            }
        }
        if any {
            out += &t.render();
            out += "\n";
        }
    }
    for f in &folder.failed {
        out += &format!("{} {} failed, so its claims are not judged: {}\n", f.entry.label, f.entry.name, f.error);
    }
    let all = || folder.results.iter().flat_map(|r| &r.header.claims);
    let machine = match all().filter(|c| c.source == Source::Machine).count() {
        0 => String::new(),
        _ => format!(" What this machine allows: {}.", counts(all().filter(|c| c.source == Source::Machine))),
    };
    out += &format!(
        "The documents' claims: {}. iomux's goals: {}.{machine}\n{}\n",
        counts(all().filter(|c| c.is_documents())),
        counts(all().filter(|c| c.is_goal())),
        folder.noise_line().1
    );
    out
}
