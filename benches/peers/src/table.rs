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

/// A cell over a peer's cell of the same rounds, round by round: each
/// round's time over the peer's time of that round (a rate, higher
/// better, is turned over: the peer's rate over this one), so that below 1
/// is ahead either way. A host whose speed drifts over minutes moves both
/// cells of one round alike, which the ratio cancels. Empty when the two
/// cells do not hold the same rounds (a column left out), or a value is
/// not positive.
pub fn over(cell: &Cell, peer: &Cell, rate: bool) -> Cell {
    if cell.0.len() != peer.0.len() || cell.0.iter().chain(&peer.0).any(|&v| v <= 0.0) {
        return Cell::default();
    }
    Cell(
        cell.0
            .iter()
            .zip(&peer.0)
            .map(|(&v, &p)| if rate { p / v } else { v / p })
            .collect(),
    )
}

/// A table's rows: each a label and its cells, rendered.
pub type Body = Vec<(String, Vec<String>)>;

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
    use super::{Cell, over};

    #[test]
    fn median_and_spread() {
        let c = Cell(vec![3.0, 1.0, 2.0]);
        assert_eq!(c.summary(), Some((2.0, 1.0, 3.0)));
        assert_eq!(c.render(1), "2.0 (1.0–3.0)");
        assert_eq!(Cell(vec![4.0, 1.0]).summary(), Some((2.5, 1.0, 4.0)));
        assert_eq!(Cell(vec![5.0, 5.0]).render(0), "5");
        assert_eq!(Cell(vec![]).render(1), "");
    }

    #[test]
    fn each_round_over_the_peers_round() {
        let ours = Cell(vec![30.0, 12.0, 20.0]);
        let peer = Cell(vec![20.0, 10.0, 25.0]);
        // Times: 1.5, 1.2, 0.8 -> median 1.2.
        assert_eq!(over(&ours, &peer, false).summary(), Some((1.2, 0.8, 1.5)));
        // Rates turned over: 20/30, 10/12, 25/20.
        let r = over(&ours, &peer, true).summary().expect("three rounds");
        assert!((r.0 - 10.0 / 12.0).abs() < 1e-12 && (r.2 - 1.25).abs() < 1e-12);
        // A column that did not run, a short one, a zero: no ratio.
        assert!(over(&ours, &Cell::default(), false).0.is_empty());
        assert!(over(&ours, &Cell(vec![1.0, 2.0]), false).0.is_empty());
        assert!(over(&Cell(vec![0.0, 1.0, 1.0]), &peer, true).0.is_empty());
    }
}
