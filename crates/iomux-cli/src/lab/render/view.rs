//! An experiment's results as a person reads them (tables, notes, plot),
//! drawn from its envelope alone: what every renderer fills its page with.

use crate::lab::harness::envelope::Envelope;
use crate::lab::harness::experiment::Experiment;
use crate::CliResult;
use serde::Serialize;

/// How an experiment shows its results, from the envelope alone.
pub trait Shown: Experiment {
    /// Tables and plot.
    fn view(env: &Envelope<Self::Params, Self::Arm, Self::Sample>) -> CliResult<View>;
}

/// A table of an experiment's page, cells as shown.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TableView {
    pub caption: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl TableView {
    /// A table of `rows` under `header`.
    pub fn new(caption: impl Into<String>, header: &[&str], rows: Vec<Vec<String>>) -> TableView {
        TableView { caption: caption.into(), header: header.iter().map(|h| h.to_string()).collect(), rows }
    }
}

/// An experiment's results as a person reads them; plain text, no markup.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Paragraphs above the tables: method, published figures.
    pub intro: Vec<String>,
    pub tables: Vec<TableView>,
    /// Footnotes: why some cells could not be measured.
    pub notes: Vec<String>,
    pub svg: Option<String>,
}

impl View {
    /// "[k]": the mark of footnote k, which says `why` (each reason noted
    /// once).
    pub fn footnote(&mut self, why: &str) -> String {
        let k = match self.notes.iter().position(|n| n == why) {
            Some(i) => i + 1,
            None => {
                self.notes.push(why.to_string());
                self.notes.len()
            }
        };
        format!("[{k}]")
    }
}
