//! SVG plots with plotters' SVG backend (text as SVG `<text>`, no fonts
//! needed at build or run time).

use std::path::Path;

use plotters::prelude::*;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One named series of (x, y) points.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// A line chart of several series.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), String> {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let y1 = ys.fold(0.0f64, f64::max).max(1e-9) * 1.05;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// A bar chart: one bar per (label, value), plus optional horizontal
/// reference lines (label, value).
pub fn bars(
    path: &Path,
    title: &str,
    y_label: &str,
    bars: &[(String, f64)],
    refs: &[(String, f64)],
) -> Result<(), String> {
    let y1 = bars
        .iter()
        .map(|b| b.1)
        .chain(refs.iter().map(|r| r.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let n = bars.len() as f64;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n, 0.0..y1)
        .map_err(err)?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = (*x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    for (i, (_, v)) in bars.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let x = i as f64;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x + 0.15, 0.0), (x + 0.85, *v)],
                c.filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{v:.2}"),
                (x + 0.35, *v + y1 * 0.02),
                ("sans-serif", 14),
            )))
            .map_err(err)?;
    }
    for (i, (label, v)) in refs.iter().enumerate() {
        let c = COLORS[(i + 3) % COLORS.len()];
        chart
            .draw_series(LineSeries::new([(0.0, *v), (n, *v)], c.stroke_width(2)))
            .map_err(err)?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    if !refs.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// Fragmentation maps as an SVG: for each named map, its pageblocks in rows
/// of [`pageframe::zone::MAP_WIDTH`], one square each, coloured by migratetype
/// (the kernel's characters, drawn): a full block in the type's colour, a
/// partly free one lighter in proportion to its free frames, a free one
/// white, an unmanaged one grey.
pub fn pageblock_maps(
    path: &Path,
    title: &str,
    maps: &[(String, Vec<pageframe::zone::PageblockUse>)],
) -> Result<(), String> {
    use pageframe::zone::MigrateType;
    let style = Cells {
        cell: 9,
        gap: 1,
        stroke_width: "0.5",
        legend: "red unmovable, orange reclaimable, blue movable, purple highatomic, green CMA; lighter: partly free; white: free; grey: not managed",
    };
    cell_maps(path, title, maps, &style, |b| {
        let fill = match b.symbol() {
            '_' => "rgb(160,160,160)".to_string(),
            '.' => "white".to_string(),
            _ => {
                let base = match b.migratetype {
                    Some(MigrateType::Unmovable) => (214, 39, 40),
                    Some(MigrateType::Reclaimable) => (255, 127, 14),
                    Some(MigrateType::Movable) => (31, 119, 180),
                    Some(MigrateType::HighAtomic) => (148, 103, 189),
                    Some(MigrateType::Cma) => (44, 160, 44),
                    _ => (0, 0, 0),
                };
                lighter(base, b.free as f64 / b.managed.max(1) as f64)
            }
        };
        (fill, "rgb(220,220,220)")
    })
}

/// Maps of 1 GiB regions (superpageblocks) as an SVG: for each named map,
/// one square a region in rows of [`pageframe::zone::MAP_WIDTH`], red when
/// tainted, blue when clean (lighter as more of it is free), white when
/// free whole; a region that can never be a 1 GiB page drawn with a grey
/// border.
pub fn superpageblock_maps(
    path: &Path,
    title: &str,
    maps: &[(String, Vec<pageframe::zone::SuperpageblockUse>)],
) -> Result<(), String> {
    let style = Cells {
        cell: 14,
        gap: 2,
        stroke_width: "1",
        legend: "red: tainted (a pageblock unmovable, reclaimable or highatomic); blue: clean, lighter as more is free; white: a free 1 GiB page; dark border: never a 1 GiB page",
    };
    cell_maps(path, title, maps, &style, |u| {
        let fill = if u.is_free() {
            "white".to_string()
        } else if u.is_tainted() {
            "rgb(214,39,40)".to_string()
        } else {
            lighter((31, 119, 180), u.free as f64 / u.range.len().max(1) as f64)
        };
        let stroke = if u.whole {
            "rgb(220,220,220)"
        } else {
            "rgb(90,90,90)"
        };
        (fill, stroke)
    })
}

/// How [`cell_maps`] draws: a square's side and the gap after it, its
/// border's width, and the legend under the maps.
struct Cells {
    cell: usize,
    gap: usize,
    stroke_width: &'static str,
    legend: &'static str,
}

/// `base` lightened towards white by `free` (0 to 1), as the maps show a
/// partly free block.
fn lighter(base: (u8, u8, u8), free: f64) -> String {
    let mix = |c: u8| (f64::from(c) + (255.0 - f64::from(c)) * free * 0.85) as u8;
    format!("rgb({},{},{})", mix(base.0), mix(base.1), mix(base.2))
}

/// Named maps of cells as an SVG, one square a cell in rows of
/// [`pageframe::zone::MAP_WIDTH`], each drawn with the fill and border
/// colours `paint` gives it.
fn cell_maps<T>(
    path: &Path,
    title: &str,
    maps: &[(String, Vec<T>)],
    style: &Cells,
    paint: impl Fn(&T) -> (String, &'static str),
) -> Result<(), String> {
    use std::fmt::Write as _;
    const LABEL: usize = 22;
    let cell = style.cell;
    let width = pageframe::zone::MAP_WIDTH;
    let rows = |n: usize| n.div_ceil(width);
    let height: usize = maps
        .iter()
        .map(|(_, m)| LABEL + rows(m.len()) * cell + 8)
        .sum::<usize>()
        + 60;
    let mut svg = String::new();
    let w = width * cell + 20;
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(svg, r#"<text x="10" y="16" font-size="14">{title}</text>"#);
    let mut y = 30;
    for (name, cells) in maps {
        let _ = writeln!(svg, r#"<text x="10" y="{}">{name}</text>"#, y + 14);
        y += LABEL;
        for (i, c) in cells.iter().enumerate() {
            let (x, yy) = (10 + (i % width) * cell, y + (i / width) * cell);
            let (fill, stroke) = paint(c);
            let _ = writeln!(
                svg,
                r#"<rect x="{x}" y="{yy}" width="{side}" height="{side}" fill="{fill}" stroke="{stroke}" stroke-width="{sw}"/>"#,
                side = cell - style.gap,
                sw = style.stroke_width
            );
        }
        y += rows(cells.len()) * cell + 8;
    }
    let _ = writeln!(
        svg,
        r#"<text x="10" y="{}">{}</text>"#,
        y + 16,
        style.legend
    );
    svg.push_str("</svg>\n");
    std::fs::write(path, svg).map_err(err)
}
