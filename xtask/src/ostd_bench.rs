//! The OSTD kernel's side-by-side rows over several boots: each boot prints
//! `bench: | workload | pageframe | osdk-frame-allocator | ratio |` rows;
//! this gathers them and prints, per row, the median of each column over
//! the boots with its spread (lowest-highest), the ratio of the medians,
//! and the median of each boot's own ratio with its spread. TCG's cycle
//! counts follow the host's load, so one boot says little, and a boot that
//! ran slow for both allocators moves the medians; a boot's ratio compares
//! two figures taken one right after the other. `--icount` runs QEMU with `-icount shift=0`, where the guest's
//! clock (and its TSC) advances with each instruction executed: the same
//! boot gives the same figures whatever the host does, a count of guest
//! instructions rather than of time.

use std::collections::BTreeMap;

/// One row's values over the boots, in the order first seen.
#[derive(Default)]
pub struct Rows {
    order: Vec<String>,
    values: BTreeMap<String, Vec<[u64; 2]>>,
    /// Rows that are not two numbers (the 2 MiB segments: `a / b`),
    /// each boot's text.
    texts: BTreeMap<String, Vec<[String; 2]>>,
}

impl Rows {
    /// Takes the `bench: |` rows of one boot's output.
    pub fn add_boot(&mut self, out: &str) {
        for l in out.lines() {
            let Some(rest) = l.trim().strip_prefix("bench: |") else {
                continue;
            };
            let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
            if cells.len() < 3 || cells[0] == "workload" {
                continue;
            }
            let name = cells[0].to_owned();
            if !self.order.contains(&name) {
                self.order.push(name.clone());
            }
            match (cells[1].parse::<u64>(), cells[2].parse::<u64>()) {
                (Ok(p), Ok(o)) => self.values.entry(name).or_default().push([p, o]),
                _ => self
                    .texts
                    .entry(name)
                    .or_default()
                    .push([cells[1].to_owned(), cells[2].to_owned()]),
            }
        }
    }

    /// Boots gathered (of the first row).
    pub fn boots(&self) -> usize {
        self.values.values().map(Vec::len).max().unwrap_or(0)
    }

    /// The table: medians with spreads, the ratio of the medians, and the
    /// median of the boots' ratios with their spread.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| workload | pageframe | osdk-frame-allocator | ratio | each boot's ratio |\n\
             |---|---:|---:|---:|---:|\n",
        );
        for name in &self.order {
            if let Some(v) = self.values.get(name) {
                let (p, o) = (spread(v, 0), spread(v, 1));
                let ratio = p.0 as f64 / o.0.max(1) as f64;
                let mut each: Vec<f64> =
                    v.iter().map(|r| r[0] as f64 / r[1].max(1) as f64).collect();
                each.sort_by(f64::total_cmp);
                let (mid, lo, hi) = (each[each.len() / 2], each[0], each[each.len() - 1]);
                s += &format!(
                    "| {name} | {} ({}-{}) | {} ({}-{}) | {ratio:.2} | {mid:.2} ({lo:.2}-{hi:.2}) |\n",
                    p.0, p.1, p.2, o.0, o.1, o.2
                );
            } else if let Some(t) = self.texts.get(name) {
                let join = |i: usize| {
                    t.iter()
                        .map(|c| c[i].as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                s += &format!("| {name} | {} | {} | | |\n", join(0), join(1));
            }
        }
        s
    }
}

/// Median, lowest and highest of column `i`.
fn spread(v: &[[u64; 2]], i: usize) -> (u64, u64, u64) {
    let mut c: Vec<u64> = v.iter().map(|r| r[i]).collect();
    c.sort_unstable();
    (c[c.len() / 2], c[0], c[c.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_spreads_and_text_rows() {
        let mut r = Rows::default();
        for (p, o, seg) in [
            (30, 10, "125 / 120"),
            (10, 10, "125 / 121"),
            (20, 40, "125 / 119"),
        ] {
            r.add_boot(&format!(
                "noise\nbench: | workload | pageframe | osdk-frame-allocator | ratio |\n\
                 bench: | 4 KiB pair | {p} | {o} | 1.00 |\n\
                 bench: | 2 MiB segments | {seg} | 127 / 12 | |\n"
            ));
        }
        assert_eq!(r.boots(), 3);
        let t = r.table();
        // The medians' ratio 20 / 10; the boots' ratios 3, 1 and 0.5.
        assert!(
            t.contains("| 4 KiB pair | 20 (10-30) | 10 (10-40) | 2.00 | 1.00 (0.50-3.00) |"),
            "{t}"
        );
        assert!(
            t.contains("| 2 MiB segments | 125 / 120, 125 / 121, 125 / 119 | 127 / 12, 127 / 12, 127 / 12 | | |"),
            "{t}"
        );
    }
}
