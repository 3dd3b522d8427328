//! `report.html`: every experiment's table and plot in one page, with the
//! machine they were measured on.

use crate::CliResult;
use std::path::{Path, PathBuf};

/// The experiments in the order the report shows them.
pub const ORDER: [&str; 6] = ["syscall-rate", "idle", "sink", "echo", "peers", "uring-features"];

/// `&`, `<` and `>` as HTML entities.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
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

/// Writes `dir/report.html` from the experiments' files in `dir`.
pub fn write(dir: &Path) -> CliResult<PathBuf> {
    std::fs::read_dir(dir).map_err(|e| format!("cannot read the results folder {}: {e}", dir.display()))?;
    let mut body = String::new();
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
                "<p>Linux {}, {} CPUs ({}), {:.1} GiB memory, RLIMIT_NOFILE {} (hard {}), io_uring_disabled = {}</p>",
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
    let html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>iomux bench report</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; font-size: 13px; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}\n\
         th:first-child, td:first-child {{ text-align: left; }}\n\
         figure {{ margin: 1em 0; overflow-x: auto; }} code {{ background: #f3f3f3; }}\n\
         section {{ border-top: 2px solid #ddd; margin-top: 2em; }} .files {{ font-size: 12px; color: #666; }}\n\
         </style></head><body>\n<h1>iomux bench report</h1>\n{machine_html}\n\
         <p>The documents' published figures are printed beside this machine's in every table.</p>\n{body}</body></html>\n"
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
