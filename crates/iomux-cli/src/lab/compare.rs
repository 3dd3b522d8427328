//! `iomux report A B`: two results folders side by side (two machines, two
//! kernels, before and after a change): the machines, the verdicts of
//! each, then every figure of every experiment's tables with its ratio B/A.

use super::report::{escape, inline, take_table, PipeTable, ORDER};
use super::summary::Claim;
use super::table::Table;
use super::Verdict;
use crate::CliResult;
use serde_json::Value;
use std::collections::HashMap;
use std::hash::Hash;
use std::path::{Path, PathBuf};

/// What `write` produced.
pub struct Written {
    /// The HTML page.
    pub path: PathBuf,
    /// The verdicts side by side, for the terminal.
    pub summary: String,
}

/// Compares results folder `b` with `a` and writes the page to `out`, or
/// to `b/compare-<name of a>.html`.
pub fn write(a: &Path, b: &Path, out: Option<&Path>) -> CliResult<Written> {
    let (fa, fb) = (Folder::read(a)?, Folder::read(b)?);
    if !fa.experiments.iter().any(|e| fb.get(e.name).is_some()) {
        return Err(format!(
            "no experiment in common: {} holds {}; {} holds {}",
            a.display(),
            fa.names().join(", "),
            b.display(),
            fb.names().join(", ")
        )
        .into());
    }
    let path = match out {
        Some(p) => p.to_path_buf(),
        None => b.join(format!("compare-{}.html", folder_name(a))),
    };
    let verdicts = verdict_rows(&fa, &fb);
    let html = page(&fa, &fb, &verdicts);
    std::fs::write(&path, html).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(Written { path, summary: summary(&fa, &fb, &verdicts) })
}

/// The folder's last component, even for `.` or `results/run/..`.
fn folder_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "A".into())
}

/// One experiment's files in a results folder.
struct Experiment {
    name: &'static str,
    md: Option<String>,
    json: Option<Value>,
}

/// A results folder and the experiments it holds, in `ORDER`.
struct Folder {
    dir: PathBuf,
    experiments: Vec<Experiment>,
}

impl Folder {
    fn read(dir: &Path) -> CliResult<Folder> {
        std::fs::read_dir(dir).map_err(|e| format!("cannot read the results folder {}: {e}", dir.display()))?;
        let mut experiments = Vec::new();
        for name in ORDER {
            let md = read_optional(&dir.join(format!("{name}.md")))?;
            let json_path = dir.join(format!("{name}.json"));
            let json = match read_optional(&json_path)? {
                Some(text) => Some(
                    serde_json::from_str::<Value>(&text)
                        .map_err(|e| format!("{} is not JSON from iomux bench: {e}", json_path.display()))?,
                ),
                None => None,
            };
            if md.is_some() || json.is_some() {
                experiments.push(Experiment { name, md, json });
            }
        }
        if experiments.is_empty() {
            return Err(format!(
                "{} holds no results of iomux bench (none of {}.md or .json)",
                dir.display(),
                ORDER.join(".md, ")
            )
            .into());
        }
        Ok(Folder { dir: dir.to_path_buf(), experiments })
    }

    fn get(&self, name: &str) -> Option<&Experiment> {
        self.experiments.iter().find(|e| e.name == name)
    }

    fn json(&self, name: &str) -> Option<&Value> {
        self.get(name)?.json.as_ref()
    }

    /// The experiment's Markdown; empty where there is none.
    fn md(&self, name: &str) -> &str {
        self.get(name).and_then(|e| e.md.as_deref()).unwrap_or("")
    }

    fn names(&self) -> Vec<&str> {
        self.experiments.iter().map(|e| e.name).collect()
    }

    /// The machine the first experiment with a JSON ran on.
    fn machine(&self) -> Option<&serde_json::Map<String, Value>> {
        self.experiments.iter().find_map(|e| e.json.as_ref()?.get("machine")?.as_object())
    }
}

/// The file's text, or None if it does not exist.
fn read_optional(path: &Path) -> CliResult<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display()).into()),
    }
}

/// The number a table cell begins with: "320,123" is 320123, "3.105
/// (2.9–3.2)" 3.105, "5.4 MB" 5.4, "0.83x" 0.83, "12%" 12; "-", "n/a" and
/// words are no number.
fn leading_number(cell: &str) -> Option<f64> {
    let b = cell.trim().as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let mut text = String::new();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        text.push(b[0] as char);
        i = 1;
    }
    let start = i;
    while i < b.len() {
        if digit(i) {
            text.push(b[i] as char);
        } else if !(b[i] == b',' && i > start && (1..=3).all(|k| digit(i + k)) && !digit(i + 4)) {
            // A comma is a thousands separator only with three digits after it.
            break;
        }
        i += 1;
    }
    if b.get(i) == Some(&b'.') && digit(i + 1) {
        text.push('.');
        i += 1;
        while digit(i) {
            text.push(b[i] as char);
            i += 1;
        }
    }
    if text.trim_start_matches(['-', '+']).is_empty() {
        return None;
    }
    text.parse().ok()
}

/// B/A; None when A is 0 and B is not (no finite ratio).
fn ratio(a: f64, b: f64) -> Option<f64> {
    if a == 0.0 {
        return (b == 0.0).then_some(1.0);
    }
    Some(b / a)
}

/// `×1.07`, `×0.934`, `×84.6`: three significant digits.
fn format_ratio(r: f64) -> String {
    let m = r.abs();
    let decimals = if m >= 100.0 {
        0
    } else if m >= 10.0 {
        1
    } else if m >= 1.0 {
        2
    } else {
        3
    };
    format!("×{r:.decimals$}")
}

/// The shading of a ratio: only how far B is from A, not whether that is
/// better (higher is better for some figures, lower for others).
fn shade(r: Option<f64>) -> &'static str {
    match r {
        Some(r) if r > 2.0 => " class=\"up2\"",
        Some(r) if r > 1.1 => " class=\"up\"",
        Some(r) if r < 0.5 => " class=\"down2\"",
        Some(r) if r < 0.9 => " class=\"down\"",
        _ => "",
    }
}

/// Each item with how many equal items came before it, so that repeated
/// row labels or column headers still match one to one.
fn with_occurrence<K: Eq + Hash + Clone>(items: impl IntoIterator<Item = K>) -> Vec<(K, usize)> {
    let mut seen: HashMap<K, usize> = HashMap::new();
    items
        .into_iter()
        .map(|k| {
            let n = seen.entry(k.clone()).or_insert(0);
            *n += 1;
            (k, *n - 1)
        })
        .collect()
}

/// Pairs equal keys of `a` and `b`, in A's order, with the keys only B has
/// placed after the B key before them: (index in A, index in B).
fn merge<K: Eq + Hash>(a: &[K], b: &[K]) -> Vec<(Option<usize>, Option<usize>)> {
    let in_b: HashMap<&K, usize> = b.iter().enumerate().map(|(j, k)| (k, j)).collect();
    let mut matched = vec![false; b.len()];
    let pairs: Vec<Option<usize>> = a.iter().map(|k| in_b.get(k).copied()).collect();
    for j in pairs.iter().flatten() {
        matched[*j] = true;
    }
    let mut out = Vec::new();
    let mut next_b = 0;
    let only_b_up_to = |end: usize, next_b: &mut usize, out: &mut Vec<_>| {
        while *next_b < end {
            if !matched[*next_b] {
                out.push((None, Some(*next_b)));
            }
            *next_b += 1;
        }
    };
    for (i, j) in pairs.into_iter().enumerate() {
        if let Some(j) = j {
            only_b_up_to(j, &mut next_b, &mut out);
            next_b = next_b.max(j + 1);
        }
        out.push((Some(i), j));
    }
    only_b_up_to(b.len(), &mut next_b, &mut out);
    out
}

/// A pipe table of an experiment's Markdown, with what introduced it.
struct Captioned<'a> {
    /// The `## ` heading above it.
    heading: &'a str,
    /// The paragraph line just above it if that ends in ':' (it says what
    /// the table holds).
    intro: &'a str,
    table: PipeTable<'a>,
}

/// The pipe tables of `md`, in order.
fn tables(md: &str) -> Vec<Captioned<'_>> {
    let mut out = Vec::new();
    let (mut heading, mut last_line) = ("", "");
    let mut lines = md.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if let Some(h) = trimmed.strip_prefix("## ") {
            heading = h;
        } else if trimmed.starts_with('|') {
            let intro = if last_line.ends_with(':') { last_line } else { "" };
            out.push(Captioned { heading, intro, table: take_table(trimmed, &mut lines) });
        }
        if !trimmed.is_empty() {
            last_line = trimmed;
        }
    }
    out
}

/// Which side something is in.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Both,
    OnlyA,
    OnlyB,
}

/// Which side a pair from `merge` has.
fn side(pair: (Option<usize>, Option<usize>)) -> Side {
    match pair {
        (Some(_), Some(_)) => Side::Both,
        (Some(_), None) => Side::OnlyA,
        _ => Side::OnlyB,
    }
}

/// Tables of A and B paired: first by their header rows (the n-th table
/// with a header in A with the n-th in B); then a table left alone in A
/// with one left alone in B next to it and the same first header cell
/// (the same table over other columns, e.g. other backends).
fn pair_tables(a: &[Captioned], b: &[Captioned]) -> Vec<(Option<usize>, Option<usize>)> {
    let merged = merge(
        &with_occurrence(a.iter().map(|c| c.table.header.clone())),
        &with_occurrence(b.iter().map(|c| c.table.header.clone())),
    );
    let mut out: Vec<(Option<usize>, Option<usize>)> = Vec::new();
    for pair in merged {
        match (out.last().copied(), pair) {
            (Some((Some(i), None)), (None, Some(j))) | (Some((None, Some(j))), (Some(i), None))
                if a[i].table.header.first() == b[j].table.header.first() =>
            {
                out.pop();
                out.push((Some(i), Some(j)));
            }
            _ => out.push(pair),
        }
    }
    out
}

/// One compared cell: A's text, B's text (either absent where its row or
/// column is).
fn cell_html(a: Option<&str>, b: Option<&str>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => match (leading_number(a), leading_number(b)) {
            (Some(x), Some(y)) => {
                let r = ratio(x, y);
                let (shown, title) = match r {
                    Some(r) => (format_ratio(r), format!(" title=\"B/A = {r:.4}\"")),
                    None => ("×∞".to_string(), String::new()),
                };
                format!(
                    "<td{}{title}><span class=\"a\">{}</span><span class=\"b\">{}</span><span class=\"r\">{shown}</span></td>",
                    shade(r),
                    inline(a),
                    inline(b)
                )
            }
            _ if a == b => format!("<td>{}</td>", inline(a)),
            _ => format!("<td><span class=\"a\">{}</span><span class=\"b\">{}</span></td>", inline(a), inline(b)),
        },
        (Some(a), None) => format!("<td class=\"one\"><span class=\"a\">{}</span></td>", inline(a)),
        (None, Some(b)) => format!("<td class=\"one\"><span class=\"b\">{}</span></td>", inline(b)),
        (None, None) => "<td></td>".into(),
    }
}

/// "only in A" after a label of something one side lacks.
fn only_mark(s: Side) -> &'static str {
    match s {
        Side::Both => "",
        Side::OnlyA => " <small class=\"only\">only in A</small>",
        Side::OnlyB => " <small class=\"only\">only in B</small>",
    }
}

/// Each row's first cell, with its occurrence.
fn row_keys<'a>(t: &PipeTable<'a>) -> Vec<(&'a str, usize)> {
    with_occurrence(t.rows.iter().map(|r| r.first().copied().unwrap_or("")))
}

/// One table of A beside its match in B: rows matched by their first cell,
/// columns by their header text, every figure with its ratio.
fn compare_table(a: &PipeTable, b: &PipeTable) -> String {
    let cols = merge(&with_occurrence(a.header.iter().copied()), &with_occurrence(b.header.iter().copied()));
    let rows = merge(&row_keys(a), &row_keys(b));
    let mut html = String::from("<div class=\"scroll\"><table>\n<tr>");
    for &(i, j) in &cols {
        let text = i.map(|i| a.header[i]).or(j.map(|j| b.header[j])).unwrap_or("");
        html += &format!("<th>{}{}</th>", inline(text), only_mark(side((i, j))));
    }
    html += "</tr>\n";
    for &(ri, rj) in &rows {
        let (ra, rb) = (ri.map(|i| &a.rows[i]), rj.map(|j| &b.rows[j]));
        let label = ra.or(rb).and_then(|r| r.first().copied()).unwrap_or("");
        html += &format!("<tr><td>{}{}</td>", inline(label), only_mark(side((ri, rj))));
        for &(ci, cj) in cols.iter().skip(1) {
            let get = |row: Option<&Vec<&'_ str>>, c: Option<usize>| -> Option<String> {
                row.zip(c).and_then(|(r, c)| r.get(c)).map(|s| s.to_string())
            };
            html += &cell_html(get(ra, ci).as_deref(), get(rb, cj).as_deref());
        }
        html += "</tr>\n";
    }
    html + "</table></div>\n"
}

/// A table only one side has, as that side wrote it.
fn lone_table(t: &PipeTable, s: Side) -> String {
    format!("<p class=\"only\">This table is {}.</p>\n<div class=\"scroll\">{}</div>\n", only_mark(s), t.to_html())
}

/// One experiment's tables, A's beside B's.
fn experiment_html(name: &str, a: &str, b: &str) -> String {
    let (ta, tb) = (tables(a), tables(b));
    let mut html = format!("<section id=\"{name}\">\n<h2>{name}</h2>\n");
    let mut heading = "";
    for (i, j) in pair_tables(&ta, &tb) {
        let shown = match (i, j) {
            (Some(i), _) => &ta[i],
            (None, Some(j)) => &tb[j],
            (None, None) => continue,
        };
        if shown.heading != heading {
            heading = shown.heading;
            html += &format!("<h3>{}</h3>\n", inline(heading));
        }
        if !shown.intro.is_empty() {
            html += &format!("<p>{}</p>\n", inline(shown.intro));
        }
        html += &match (i, j) {
            (Some(i), Some(j)) => compare_table(&ta[i].table, &tb[j].table),
            _ => lone_table(&shown.table, side((i, j))),
        };
    }
    if ta.is_empty() && tb.is_empty() {
        html += "<p>No tables (no Markdown from iomux bench) on either side.</p>\n";
    }
    html + "</section>\n"
}

/// The checks of an experiment's JSON, as the summary reads them (older
/// results get their verdict from `met`).
fn checks(json: Option<&Value>) -> Vec<Claim> {
    json.and_then(|j| j.get("checks")).and_then(|c| serde_json::from_value(c.clone()).ok()).unwrap_or_default()
}

/// A claim of one experiment, with each side's verdict.
struct VerdictRow {
    experiment: &'static str,
    claim: String,
    a: Option<Claim>,
    b: Option<Claim>,
}

/// Every claim of every experiment, matched by its text within the
/// experiment; those of experiments one side lacks too.
fn verdict_rows(fa: &Folder, fb: &Folder) -> Vec<VerdictRow> {
    let mut rows = Vec::new();
    for name in ORDER {
        let (ca, cb) = (checks(fa.json(name)), checks(fb.json(name)));
        let key = |c: &[Claim]| with_occurrence(c.iter().map(|c| c.claim.clone()));
        let pairs = merge(&key(&ca), &key(&cb));
        // Options, so that each verdict moves into its row once.
        let taken = |c: Vec<Claim>| -> Vec<(String, Option<Claim>)> {
            c.into_iter().map(|c| (c.claim.clone(), Some(c))).collect()
        };
        let (mut ca, mut cb) = (taken(ca), taken(cb));
        for (i, j) in pairs {
            let claim = i.map(|i| ca[i].0.clone()).or(j.map(|j| cb[j].0.clone())).unwrap_or_default();
            let a = i.and_then(|i| ca[i].1.take());
            let b = j.and_then(|j| cb[j].1.take());
            rows.push(VerdictRow { experiment: name, claim, a, b });
        }
    }
    rows
}

/// A check's value as the checks table prints it.
fn value_text(v: Option<f64>) -> String {
    v.map_or("-".into(), super::summary::number)
}

/// "holds 0.934", or "—" where the side has no such claim.
fn verdict_text(v: &Option<Claim>) -> String {
    v.as_ref().map_or("—".into(), |v| format!("{} {}", v.verdict().as_str(), value_text(v.value)))
}

/// B/A of the claims' values, where both have one.
fn value_ratio(row: &VerdictRow) -> Option<f64> {
    let (a, b) = (row.a.as_ref()?.value?, row.b.as_ref()?.value?);
    ratio(a, b)
}

/// One side's verdict, value and why, or a dash for a claim it lacks.
fn verdict_cell(v: &Option<Claim>) -> String {
    match v {
        None => "<td class=\"one\">—</td>".into(),
        Some(v) => format!(
            "<td class=\"v {}\"><b>{}</b> {}<small>{}</small></td>",
            // A class only for the verdicts coloured; the text is escaped.
            match v.verdict() {
                Verdict::Holds => "holds",
                Verdict::DoesNotHold => "does-not-hold",
                _ => "",
            },
            v.verdict().as_str(),
            value_text(v.value),
            escape(&v.why())
        ),
    }
}

/// The table of every claim with both sides' verdicts.
fn verdicts_html(rows: &[VerdictRow]) -> String {
    if rows.is_empty() {
        return "<p>Neither side's results hold checks (no JSON from iomux bench).</p>\n".into();
    }
    let mut html = String::from(
        "<div class=\"scroll\"><table class=\"text\">\n<tr><th>experiment</th><th>claim</th><th>A</th><th>B</th><th>B/A of the value</th></tr>\n",
    );
    for row in rows {
        let changed = matches!((&row.a, &row.b), (Some(a), Some(b)) if a.verdict() != b.verdict());
        let r = value_ratio(row);
        html += &format!(
            "<tr{}><td>{}</td><td class=\"claim\">{}</td>{}{}<td{}>{}</td></tr>\n",
            if changed { " class=\"changed\"" } else { "" },
            row.experiment,
            escape(&row.claim),
            verdict_cell(&row.a),
            verdict_cell(&row.b),
            shade(r),
            r.map_or("-".into(), format_ratio)
        );
    }
    html + "</table></div>\n"
}

/// "3.2% of a CPU": the share of a CPU other processes used during the
/// experiment, if its JSON says.
fn noise(e: Option<&Experiment>) -> Option<String> {
    let share = e?.json.as_ref()?.get("noise")?.get("other_cpu_share")?.as_f64()?;
    Some(format!("{:.1}% of a CPU", share * 100.0))
}

/// Each experiment's machine noise on both sides; nothing if neither says.
fn noise_html(fa: &Folder, fb: &Folder) -> String {
    let mut rows = String::new();
    for name in ORDER {
        let (a, b) = (noise(fa.get(name)), noise(fb.get(name)));
        if a.is_some() || b.is_some() {
            let show = |s: Option<String>| s.unwrap_or_else(|| "-".into());
            rows += &format!("<tr><td>{name}</td><td>{}</td><td>{}</td></tr>\n", show(a), show(b));
        }
    }
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "<p>Machine noise: the CPU other processes used while each experiment ran.</p>\n\
         <div class=\"scroll\"><table>\n<tr><th>experiment</th><th>A</th><th>B</th></tr>\n{rows}</table></div>\n"
    )
}

/// A machine field as text: memory in GiB, strings without quotes.
fn machine_field(key: &str, v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(v) if key == "memory_bytes" => {
            format!("{:.1} GiB", v.as_f64().unwrap_or(0.0) / (1u64 << 30) as f64)
        }
        Some(v) => v.to_string(),
    }
}

/// The two machines, a row a field; rows that differ are marked.
fn machines_html(fa: &Folder, fb: &Folder) -> String {
    let (ma, mb) = (fa.machine(), fb.machine());
    let known = ["kernel", "cpus", "cpu_model", "memory_bytes", "nofile", "nofile_hard", "io_uring_disabled"];
    let mut keys: Vec<&str> = known.to_vec();
    let mut more: Vec<&str> = ma.into_iter().chain(mb).flat_map(|m| m.keys()).map(String::as_str).collect();
    more.sort_unstable();
    more.dedup();
    keys.extend(more.into_iter().filter(|k| !known.contains(k)));
    let mut html =
        String::from("<div class=\"scroll\"><table class=\"text\">\n<tr><th></th><th>A</th><th>B</th></tr>\n");
    for k in keys {
        let (a, b) = (machine_field(k, ma.and_then(|m| m.get(k))), machine_field(k, mb.and_then(|m| m.get(k))));
        html += &format!(
            "<tr{}><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            if a == b { "" } else { " class=\"changed\"" },
            escape(k),
            escape(&a),
            escape(&b)
        );
    }
    html + "</table></div>\n"
}

const STYLE: &str = "\
body { font-family: sans-serif; max-width: 1100px; margin: 1em auto; padding: 0 8px; color: #222; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; vertical-align: top; }
th:first-child, td:first-child { text-align: left; }
td .a, td .b, td .r { display: block; white-space: nowrap; }
td .a { color: #666; } td .r { font-size: 11px; color: #444; }
.up { background: #fdebd0; } .up2 { background: #f8c99b; }
.down { background: #dbe9f7; } .down2 { background: #b3d0ee; }
.one { background: #f4f4f4; color: #777; } small.only, p.only { color: #a05a00; }
tr.changed td { font-weight: bold; }
table.text th, table.text td { text-align: left; }
td.v { min-width: 9em; } td.claim { min-width: 14em; }
td.v small { display: block; color: #666; font-weight: normal; max-width: 28em; }
td.holds b { color: #1a7f37; } td.does-not-hold b { color: #b42318; }
.key span { padding: 0 4px; }
section { border-top: 2px solid #ddd; margin-top: 1.5em; }
";

/// The whole page: machines, experiments, verdicts, then the tables.
fn page(fa: &Folder, fb: &Folder, verdicts: &[VerdictRow]) -> String {
    let list = |names: Vec<&str>| if names.is_empty() { "none".to_string() } else { names.join(", ") };
    let both: Vec<&str> = fa.names().into_iter().filter(|n| fb.get(n).is_some()).collect();
    let only_a: Vec<&str> = fa.names().into_iter().filter(|n| fb.get(n).is_none()).collect();
    let only_b: Vec<&str> = fb.names().into_iter().filter(|n| fa.get(n).is_none()).collect();
    let mut sections = String::new();
    for name in &both {
        sections += &experiment_html(name, fa.md(name), fb.md(name));
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>iomux: {b} compared with {a}</title>\n<style>\n{STYLE}</style></head><body>\n\
         <h1>iomux bench: B compared with A</h1>\n\
         <p><b>A</b> = {a}<br><b>B</b> = {b}</p>\n\
         <p class=\"key\">In every table a figure reads A, then B, then B/A. Shaded where B differs from A by more than 10%: \
         <span class=\"up\">B higher</span> <span class=\"up2\">over ×2</span> \
         <span class=\"down\">B lower</span> <span class=\"down2\">under ×0.5</span> \
         (whether that is better depends on the figure). Bold rows differ between the sides.</p>\n\
         <h2>Machines</h2>\n{machines}\
         <h2>Experiments</h2>\n<p>In both: {both}. Only in A: {only_a}. Only in B: {only_b}.</p>\n\
         <h2>Verdicts</h2>\n{verdicts}{noise}{sections}</body></html>\n",
        a = escape(&fa.dir.display().to_string()),
        b = escape(&fb.dir.display().to_string()),
        machines = machines_html(fa, fb),
        both = list(both.clone()),
        only_a = list(only_a),
        only_b = list(only_b),
        verdicts = verdicts_html(verdicts),
        noise = noise_html(fa, fb),
    )
}

/// The verdicts side by side, for the terminal.
fn summary(fa: &Folder, fb: &Folder, verdicts: &[VerdictRow]) -> String {
    // The claim first: the terminal table aligns only its first column left.
    let mut t = Table::new(["experiment: claim", "A", "B", "B/A"]);
    for row in verdicts {
        t.row([
            format!("{}: {}", row.experiment, row.claim),
            verdict_text(&row.a),
            verdict_text(&row.b),
            value_ratio(row).map_or("-".into(), format_ratio),
        ]);
    }
    let mut out = format!("A: {}\nB: {}\n", fa.dir.display(), fb.dir.display());
    out += &t.render();
    for (f, g, side) in [(fa, fb, "A"), (fb, fa, "B")] {
        let only: Vec<&str> = f.names().into_iter().filter(|n| g.get(n).is_none()).collect();
        if !only.is_empty() {
            out += &format!("only in {side}: {}\n", only.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_lead_cells() {
        assert_eq!(leading_number("320,123"), Some(320123.0));
        assert_eq!(leading_number("139,407,285"), Some(139407285.0));
        assert_eq!(leading_number(" 3.105 (2.9–3.2)"), Some(3.105));
        assert_eq!(leading_number("319,570 (300,935–328,437)"), Some(319570.0));
        assert_eq!(leading_number("5.4 MB"), Some(5.4));
        assert_eq!(leading_number("97.95 Mbit/s"), Some(97.95));
        assert_eq!(leading_number("0.83x"), Some(0.83));
        assert_eq!(leading_number("12%"), Some(12.0));
        assert_eq!(leading_number("-2.5"), Some(-2.5));
        // A comma not followed by three digits ends the number.
        assert_eq!(leading_number("1,25"), Some(1.0));
        assert_eq!(leading_number("7, 8"), Some(7.0));
        for text in ["-", "", "n/a [1]", "select [1]", "on", "<= 0.1", ".", "-x"] {
            assert_eq!(leading_number(text), None, "{text:?}");
        }
    }

    #[test]
    fn ratios_and_their_text() {
        assert_eq!(ratio(2.0, 3.0), Some(1.5));
        assert_eq!(ratio(0.0, 0.0), Some(1.0));
        assert_eq!(ratio(0.0, 1.0), None);
        assert_eq!(format_ratio(1.07), "×1.07");
        assert_eq!(format_ratio(0.9344), "×0.934");
        assert_eq!(format_ratio(84.65), "×84.7");
        assert_eq!(format_ratio(1234.4), "×1234");
        assert_eq!(shade(Some(1.05)), "");
        assert_eq!(shade(Some(1.2)), " class=\"up\"");
        assert_eq!(shade(Some(0.8)), " class=\"down\"");
        assert_eq!(shade(None), "");
    }

    #[test]
    fn merge_keeps_order_and_places_lone_keys() {
        assert_eq!(
            merge(&["x", "y", "z"], &["x", "n", "z"]),
            vec![(Some(0), Some(0)), (Some(1), None), (None, Some(1)), (Some(2), Some(2))]
        );
        assert_eq!(merge(&["x"], &["n", "x", "m"]), vec![(None, Some(0)), (Some(0), Some(1)), (None, Some(2))]);
        assert_eq!(with_occurrence(["a", "b", "a"]), vec![("a", 0), ("b", 0), ("a", 1)]);
    }

    const A_MD: &str = "## E2 idle\n\nFirst:\n\n| idle Z | epoll | poll |\n|:--|--:|--:|\n| 0 | 0.100 | 0.200 |\n\
                        | 100 | 1,000 | n/a |\n\nChecks:\n\n| k | v |\n|--|--|\n| a | 1 |\n| a | 2 |\n";
    const B_MD: &str = "## E2 idle\n\nFirst:\n\n| idle Z | epoll | uring |\n|:--|--:|--:|\n| 0 | 0.107 | 0.3 |\n\
                        | 100 | 1,500 | 0.4 |\n| 200 | 0.5 | 0.6 |\n\nChecks:\n\n| k | v |\n|--|--|\n| a | 1 |\n| a | 4 |\n";

    #[test]
    fn tables_rows_and_columns_match() {
        let (ta, tb) = (tables(A_MD), tables(B_MD));
        assert_eq!((ta.len(), tb.len()), (2, 2));
        assert_eq!((ta[0].heading, ta[0].intro), ("E2 idle", "First:"));
        // Other columns, same first header cell: still one table.
        assert_eq!(pair_tables(&ta, &tb), vec![(Some(0), Some(0)), (Some(1), Some(1))]);
        let html = compare_table(&ta[0].table, &tb[0].table);
        assert!(html.contains("<th>poll <small class=\"only\">only in A</small></th>"), "{html}");
        assert!(html.contains("<th>uring <small class=\"only\">only in B</small></th>"), "{html}");
        // 0.107 / 0.100 and 1,500 / 1,000.
        assert!(html.contains("<span class=\"r\">×1.07</span>"), "{html}");
        assert!(html.contains("<td class=\"up\" title=\"B/A = 1.5000\">"), "{html}");
        assert!(html.contains("<tr><td>200 <small class=\"only\">only in B</small></td><td class=\"one\"><span class=\"b\">0.5</span>"), "{html}");
        // Repeated first cells match by occurrence: the second `a` is 2 against 4.
        let checks = compare_table(&ta[1].table, &tb[1].table);
        assert!(checks.contains("×1.00") && checks.contains("×2.00"), "{checks}");
        // A table with another first header cell is not paired.
        let other = tables("| backend | x |\n|--|--|\n| e | 1 |\n");
        assert_eq!(pair_tables(&ta[..1], &other), vec![(Some(0), None), (None, Some(0))]);
    }

    #[test]
    fn verdicts_come_from_met_in_older_results() {
        let json: Value = serde_json::json!({"checks": [
            {"claim": "c1", "value": 0.5, "met": true, "detail": "d1"},
            {"claim": "c2", "value": 2.0, "met": false, "detail": "d2"},
            {"claim": "c3", "value": null, "met": null, "detail": "d3"},
            {"claim": "c4", "value": 1.0, "met": true, "verdict": "inconclusive", "why": "noisy"},
        ]});
        let got: Vec<(String, String, String)> =
            checks(Some(&json)).iter().map(|c| (c.claim.clone(), c.verdict().as_str().into(), c.why())).collect();
        // No noise was recorded then: never "does not hold".
        let old = "noise not recorded (results older than the noise guard); the value would";
        let (c1, c2) = (format!("{old} support the claim"), format!("{old} not support the claim"));
        let want = [
            ("c1", "inconclusive", c1.as_str()),
            ("c2", "inconclusive", c2.as_str()),
            ("c3", "not measurable", "d3"),
            ("c4", "inconclusive", "noisy"),
        ];
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1.as_str(), g.2.as_str()), w);
        }
        assert!(checks(None).is_empty());
    }

    fn folder(dir: &Path, md: &str, checks: Value, noise: Option<f64>) {
        let mut json = serde_json::json!({"experiment": "idle", "checks": checks,
            "machine": {"kernel": "6.1", "cpus": 2, "cpu_model": "x", "memory_bytes": 1u64 << 30}});
        if let Some(share) = noise {
            json["noise"] = serde_json::json!({"other_cpu_share": share});
        }
        std::fs::write(dir.join("idle.md"), md).unwrap();
        std::fs::write(dir.join("idle.json"), json.to_string()).unwrap();
    }

    #[test]
    fn two_folders_make_a_page() {
        let (a, b) = (
            crate::os::PrivateDir::new("iomux-cmp-a", "A").unwrap(),
            crate::os::PrivateDir::new("iomux-cmp-b", "B").unwrap(),
        );
        folder(
            &a.0,
            A_MD,
            serde_json::json!([{"claim": "flat", "value": 0.5, "met": true, "verdict": "holds", "why": "flat"}]),
            None,
        );
        folder(
            &b.0,
            B_MD,
            serde_json::json!([{"claim": "flat", "value": 0.6, "met": false, "verdict": "does not hold", "why": "too steep"}]),
            Some(0.032),
        );
        std::fs::write(b.0.join("echo.md"), "| a | b |\n|--|--|\n| 1 | 2 |\n").unwrap();
        let written = write(&a.0, &b.0, None).unwrap();
        let a_name = a.0.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(written.path, b.0.join(format!("compare-{a_name}.html")));
        let html = std::fs::read_to_string(&written.path).unwrap();
        assert!(html.contains("width=device-width"));
        assert!(html.contains("<span class=\"r\">×1.07</span>"), "{html}");
        assert!(html.contains("Only in B: echo."), "{html}");
        assert!(html.contains("3.2% of a CPU"), "{html}");
        assert!(html.contains("<b>holds</b> 0.500") && html.contains("<b>does not hold</b> 0.600"), "{html}");
        assert!(html.contains("<td class=\"up\">×1.20</td>"), "{html}");
        assert!(!html.contains("http"), "the page loads nothing");
        assert!(
            written.summary.contains("holds 0.500") && written.summary.contains("only in B: echo"),
            "{}",
            written.summary
        );

        let out = a.0.join("x.html");
        assert_eq!(write(&a.0, &b.0, Some(&out)).unwrap().path, out);
    }

    #[test]
    fn clear_errors() {
        let (a, b) = (
            crate::os::PrivateDir::new("iomux-cmp-a", "A").unwrap(),
            crate::os::PrivateDir::new("iomux-cmp-b", "B").unwrap(),
        );
        let missing = a.0.join("nope");
        let err = write(&missing, &b.0, None).err().unwrap().to_string();
        assert!(err.contains("nope"), "{err}");
        let err = write(&a.0, &b.0, None).err().unwrap().to_string();
        assert!(err.contains("holds no results"), "{err}");
        std::fs::write(a.0.join("sink.md"), "x").unwrap();
        std::fs::write(b.0.join("echo.md"), "x").unwrap();
        let err = write(&a.0, &b.0, None).err().unwrap().to_string();
        assert!(
            err.contains("no experiment in common") && err.contains("holds sink") && err.contains("holds echo"),
            "{err}"
        );
    }
}
