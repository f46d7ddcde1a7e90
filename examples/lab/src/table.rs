//! Plain-text tables that are also valid markdown.

/// A table: a header row and data rows, printed with aligned columns.
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(head: &[&str]) -> Self {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders as a markdown table with padded columns.
    pub fn render(&self) -> String {
        let n = self.head.len();
        let cell = |r: &Vec<String>, i: usize| r.get(i).cloned().unwrap_or_default();
        let width: Vec<usize> = (0..n)
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| cell(r, i).len())
                    .chain([self.head[i].len(), 3])
                    .max()
                    .unwrap_or(3)
            })
            .collect();
        let line = |cells: Vec<String>| {
            let parts: Vec<String> = cells
                .iter()
                .zip(&width)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            format!("| {} |\n", parts.join(" | "))
        };
        let mut s = line(self.head.clone());
        s.push_str(&line(width.iter().map(|w| "-".repeat(*w)).collect()));
        for r in &self.rows {
            s.push_str(&line((0..n).map(|i| cell(r, i)).collect()));
        }
        s
    }
}

/// Formats with `d` decimals.
pub fn f(x: f64, d: usize) -> String {
    format!("{x:.d$}")
}

/// Formats a fraction as a percentage with `d` decimals.
pub fn pct(x: f64, d: usize) -> String {
    format!("{:.d$}%", x * 100.0)
}
