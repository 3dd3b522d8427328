//! Renderers of typed results: Markdown pages, the HTML report, the
//! terminal's verdicts, tables and plots. None of them reads anything but
//! the envelope.

pub mod html;
pub mod markdown;
pub mod plot;
pub mod table;
pub mod terminal;
pub mod view;

use crate::CliResult;
use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// Writes `<name>.md` and, when there is a plot, `<name>.svg`.
pub fn write_page(dir: &Path, name: &str, markdown: &str, svg: Option<&str>) -> CliResult<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut put = |file: String, body: &str| -> CliResult<()> {
        let path = dir.join(file);
        std::fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    put(format!("{name}.md"), markdown)?;
    if let Some(svg) = svg {
        put(format!("{name}.svg"), svg)?;
    }
    Ok(written)
}
