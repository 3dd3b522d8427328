//! The verdicts for a terminal: the documents' claims, then iomux's goals,
//! then how the machine's noise bore on them. The last thing a bench
//! prints, and what `iomux report DIR` prints.

use super::html::counts;
use crate::lab::results::Folder;
use crate::lab::table::Table;

pub fn verdicts(folder: &Folder) -> String {
    let mut out = String::from("\n==== Verdicts on this machine ====\n");
    for documents in [true, false] {
        let mut t = Table::new([
            if documents { "the documents' claims" } else { "iomux's own goals" },
            "",
            "verdict",
            "measured: median [95% interval]",
            "why",
        ]);
        let mut any = false;
        for r in &folder.results {
            for c in r.header.claims.iter().filter(|c| c.is_documents() == documents) {
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
    let all = || folder.results.iter().flat_map(|r| &r.header.claims);
    out += &format!(
        "The documents' claims: {}. iomux's goals: {}.\n{}\n",
        counts(all().filter(|c| c.is_documents())),
        counts(all().filter(|c| !c.is_documents())),
        folder.noise_line().1
    );
    out
}
