//! Markdown tables, aligned so they read well in a terminal too.

pub use crate::lab::harness::claim::thousands;

pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Table {
        Table { headers: headers.into_iter().map(Into::into).collect(), rows: Vec::new() }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.chars().count().max(3)).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                width[i] = width[i].max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::from("|");
            for (i, w) in width.iter().enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                // First column left-aligned (labels), the rest right (numbers).
                if i == 0 {
                    s += &format!(" {cell:<w$} |");
                } else {
                    s += &format!(" {cell:>w$} |");
                }
            }
            s + "\n"
        };
        let mut out = line(&self.headers);
        out += "|";
        for (i, w) in width.iter().enumerate() {
            out += &if i == 0 { format!(":{}|", "-".repeat(w + 1)) } else { format!("{}:|", "-".repeat(w + 1)) };
        }
        out += "\n";
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}

/// Syscalls by name as one cell: "read 1,000, write 998".
pub fn kinds(syscalls: &std::collections::BTreeMap<String, u64>) -> String {
    syscalls.iter().map(|(k, v)| format!("{k} {}", thousands(*v as f64))).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(714848.0), "714,848");
        assert_eq!(thousands(-1234567.0), "-1,234,567");
        assert_eq!(thousands(f64::NAN), "-");
    }

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(["fds", "calls/s"]);
        t.row(["1", "714,848"]);
        t.row(["10000", "3"]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines.iter().all(|l| l.len() == lines[0].len()), "{s}");
        assert!(lines[1].starts_with("|:") && lines[1].ends_with(":|"));
    }
}
