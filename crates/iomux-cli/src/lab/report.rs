//! `report.html`: every experiment's table and plot in one page, with the
//! machine they were measured on.

use crate::CliResult;
use std::path::{Path, PathBuf};

/// The experiments in the order the report shows them.
pub const ORDER: [&str; 7] = ["syscall-rate", "idle", "sink", "echo", "peers", "uring-features", "http"];

/// Text made safe inside HTML, attribute values included.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `**bold**` and `` `code` `` inside an escaped line.
pub(crate) fn inline(s: &str) -> String {
    let mut out = String::new();
    let (mut bold, mut code) = (false, false);
    let escaped = escape(s);
    let mut chars = escaped.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                out += if bold { "</b>" } else { "<b>" };
                bold = !bold;
            }
            '`' => {
                out += if code { "</code>" } else { "<code>" };
                code = !code;
            }
            c => out.push(c),
        }
    }
    if bold {
        out += "</b>";
    }
    if code {
        out += "</code>";
    }
    out
}

/// One pipe table of the lab's Markdown: its cells as written, trimmed.
pub(crate) struct PipeTable<'a> {
    /// The first line's cells.
    pub header: Vec<&'a str>,
    /// The other lines' cells, without the rule.
    pub rows: Vec<Vec<&'a str>>,
}

/// The table whose header line is `first`, taking its other lines (up to
/// the first line that is not a table row) from `lines`; the `---` rule
/// under the header is dropped.
pub(crate) fn take_table<'a>(first: &'a str, lines: &mut std::iter::Peekable<std::str::Lines<'a>>) -> PipeTable<'a> {
    let cells = |l: &'a str| -> Vec<&'a str> { l.trim().trim_matches('|').split('|').map(str::trim).collect() };
    let mut table = PipeTable { header: cells(first), rows: Vec::new() };
    while let Some(row) = lines.next_if(|l| l.trim().starts_with('|')) {
        if !row.contains("---") {
            table.rows.push(cells(row));
        }
    }
    table
}

impl PipeTable<'_> {
    /// The table as HTML, its cells' inline markup converted.
    pub(crate) fn to_html(&self) -> String {
        let mut html = String::from("<table>\n<tr>");
        for c in &self.header {
            html += &format!("<th>{}</th>", inline(c));
        }
        html += "</tr>\n";
        for row in &self.rows {
            html += "<tr>";
            for c in row {
                html += &format!("<td>{}</td>", inline(c));
            }
            html += "</tr>\n";
        }
        html + "</table>\n"
    }
}

/// The Markdown the lab writes (headings, paragraphs, pipe tables) as HTML.
pub fn markdown_to_html(md: &str) -> String {
    let mut html = String::new();
    let mut lines = md.lines().peekable();
    let mut paragraph: Vec<String> = Vec::new();
    let flush = |p: &mut Vec<String>, html: &mut String| {
        if !p.is_empty() {
            *html += &format!("<p>{}</p>\n", p.join("<br>\n"));
            p.clear();
        }
    };
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if let Some(h) = trimmed.strip_prefix("## ") {
            flush(&mut paragraph, &mut html);
            html += &format!("<h2>{}</h2>\n", inline(h));
        } else if trimmed.starts_with('|') {
            flush(&mut paragraph, &mut html);
            html += &take_table(trimmed, &mut lines).to_html();
        } else if trimmed.is_empty() {
            flush(&mut paragraph, &mut html);
        } else {
            paragraph.push(inline(trimmed));
        }
    }
    flush(&mut paragraph, &mut html);
    html
}

/// The page's look: narrow screens get one column and tables that scroll
/// sideways; plots shrink to the screen (their SVGs carry a viewBox).
const STYLE: &str = "\
body { font-family: system-ui, sans-serif; max-width: 1320px; margin: 0 auto; padding: 0 12px; color: #222; }
h1 { margin: 12px 0 4px; font-size: 24px; } h2 { margin: 10px 0; } h3 { margin: 8px 0 4px; font-size: 16px; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; display: block; }
code { background: #f3f3f3; } .scroll { overflow-x: auto; }
section { border-top: 2px solid #ddd; margin-top: 1.5em; } .files { font-size: 12px; color: #666; }
p.machine { margin: 0; color: #555; font-size: 13px; }
#verdicts { border-top: none; margin-top: 0; }
#verdicts .top { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
#verdicts .claims { flex: 3 1 600px; min-width: 0; }
#verdicts figure.headline { flex: 2 1 360px; min-width: 0; margin: 0; }
#verdicts figcaption { font-size: 12px; color: #555; }
table.verdicts { font-size: 13px; margin: 0.2em 0; }
table.verdicts td, table.verdicts th { text-align: left; vertical-align: middle; }
table.verdicts td.why { color: #555; font-size: 12px; max-width: 26em; }
details { margin: 2px 0; font-size: 14px; } summary { cursor: pointer; }
.badge { display: inline-block; padding: 0 6px; border-radius: 9px; font-weight: 600; white-space: nowrap; }
.badge.holds { background: #d3ecd9; color: #116329; } .badge.fails { background: #f6d5d5; color: #a40e26; }
.badge.unsure { background: #fbefc5; color: #7d4e00; } .badge.none { background: #eee; color: #555; }
svg.gauge circle.holds { fill: #1a7f37; } svg.gauge circle.fails { fill: #cf222e; }
svg.gauge circle.unsure { fill: #bf8700; } svg.gauge circle.none { fill: #888; }
p.busy { background: #fbefc5; padding: 6px 10px; } p.quiet { color: #116329; font-size: 13px; }
";

/// Writes `dir/report.html` from the experiments' files in `dir`.
pub fn write(dir: &Path) -> CliResult<PathBuf> {
    std::fs::read_dir(dir).map_err(|e| format!("cannot read the results folder {}: {e}", dir.display()))?;
    let mut body = String::new();
    let mut headline = None;
    let mut machine = None;
    let mut found = 0;
    for name in ORDER {
        let md_path = dir.join(format!("{name}.md"));
        let Ok(md) = std::fs::read_to_string(&md_path) else { continue };
        found += 1;
        if machine.is_none() {
            machine = std::fs::read_to_string(dir.join(format!("{name}.json")))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .map(|v| v["machine"].clone());
        }
        body += &format!("<section id=\"{name}\">\n{}", markdown_to_html(&md));
        if let Ok(svg) = std::fs::read_to_string(dir.join(format!("{name}.svg"))) {
            // The first experiment's plot also stands beside the verdicts,
            // so the first screen holds the answer and one piece of evidence.
            headline.get_or_insert_with(|| {
                format!(
                    "<figure class=\"headline\">{svg}<figcaption>{}: the first experiment's plot \
                     (<a href=\"#{name}\">its details</a>)</figcaption></figure>\n",
                    super::summary::label(name)
                )
            });
            body += &format!("<figure>{svg}</figure>\n");
        }
        body += &format!(
            "<p class=\"files\">Data: <a href=\"{name}.json\">{name}.json</a>, <a href=\"{name}.md\">{name}.md</a></p>\n</section>\n"
        );
    }
    if found == 0 {
        return Err(format!("{} holds no experiment results (*.md from iomux bench)", dir.display()).into());
    }
    let machine_html = machine
        .map(|m| {
            let field = |k: &str| escape(m[k].to_string().trim_matches('"'));
            format!(
                "<p class=\"machine\">Linux {}, {} CPUs ({}), {:.1} GiB memory, RLIMIT_NOFILE {} (hard {}), io_uring_disabled = {}</p>",
                field("kernel"),
                field("cpus"),
                field("cpu_model"),
                m["memory_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64,
                field("nofile"),
                field("nofile_hard"),
                field("io_uring_disabled"),
            )
        })
        .unwrap_or_default();
    let verdicts = super::summary::html(&super::summary::load(dir), headline.as_deref());
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>iomux bench report</title>\n<style>\n{STYLE}</style></head><body>\n<h1>iomux bench report</h1>\n\
         {machine_html}\n{verdicts}\
         <p>The details: every experiment's tables, with the documents' published figures beside this \
         machine's, and its plot.</p>\n{body}</body></html>\n"
    );
    let path = dir.join("report.html");
    std::fs::write(&path, html).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_headings_and_inline_markup_convert() {
        let html = markdown_to_html("## E9 **x** & y\n\nSome `code` here.\n\n| a | b |\n|:--|--:|\n| 1 | <2> |\n");
        assert!(html.contains("<h2>E9 <b>x</b> &amp; y</h2>"), "{html}");
        assert!(html.contains("<code>code</code>"));
        assert!(html.contains("<th>a</th><th>b</th>"));
        assert!(html.contains("<td>1</td><td>&lt;2&gt;</td>"));
        assert!(!html.contains("---"));
    }
}
