//! Medians and spreads of the rounds, as a markdown table.

/// The rounds' values of one cell.
#[derive(Clone, Debug, Default)]
pub struct Cell(pub Vec<f64>);

impl Cell {
    /// The median, lowest and highest value; `None` for an empty cell.
    pub fn summary(&self) -> Option<(f64, f64, f64)> {
        let mut v = self.0.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some((median, v[0], v[n - 1]))
    }

    /// `median (lowest–highest)` with `digits` decimals; just the value
    /// when every round gave the same; empty for no value.
    pub fn render(&self, digits: usize) -> String {
        match self.summary() {
            None => String::new(),
            Some((m, lo, hi)) if format!("{lo:.digits$}") == format!("{hi:.digits$}") => {
                format!("{m:.digits$}")
            }
            Some((m, lo, hi)) => format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})"),
        }
    }
}

/// A markdown table: a heading row, then rows of a label and cells.
pub fn markdown(corner: &str, heads: &[&str], rows: &[(String, Vec<String>)]) -> String {
    let mut out = format!("| {corner} |");
    for h in heads {
        out += &format!(" {h} |");
    }
    out += "\n|---|";
    for _ in heads {
        out += "---:|";
    }
    for (label, cells) in rows {
        out += &format!("\n| {label} |");
        for c in cells {
            out += &format!(" {c} |");
        }
    }
    out + "\n"
}

#[cfg(test)]
mod tests {
    use super::Cell;

    #[test]
    fn median_and_spread() {
        let c = Cell(vec![3.0, 1.0, 2.0]);
        assert_eq!(c.summary(), Some((2.0, 1.0, 3.0)));
        assert_eq!(c.render(1), "2.0 (1.0–3.0)");
        assert_eq!(Cell(vec![4.0, 1.0]).summary(), Some((2.5, 1.0, 4.0)));
        assert_eq!(Cell(vec![5.0, 5.0]).render(0), "5");
        assert_eq!(Cell(vec![]).render(1), "");
    }
}
