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
