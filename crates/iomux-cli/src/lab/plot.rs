//! SVG line plots (plotters' SVG backend: no fonts or system libraries).

use crate::CliResult;
use plotters::coord::combinators::IntoLogRange;
use plotters::prelude::*;

pub struct Series {
    pub name: String,
    /// (x, y); points with a non-finite or non-positive y are skipped on a
    /// log axis (a cell that could not be measured).
    pub points: Vec<(f64, f64)>,
    /// Published figures are drawn dashed, ours solid.
    pub published: bool,
}

pub struct Axes<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x_log: bool,
    pub y_log: bool,
    /// Where the legend sits: a corner the lines leave empty.
    pub legend: SeriesLabelPosition,
}

const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(90, 90, 200),
];

fn usable(points: &[(f64, f64)], x_log: bool, y_log: bool) -> Vec<(f64, f64)> {
    points
        .iter()
        .copied()
        .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!x_log || x > 0.0) && (!y_log || y > 0.0))
        .collect()
}

fn bounds(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    if log {
        (lo / 2.0, hi * 2.0)
    } else {
        let pad = ((hi - lo) * 0.05).max(hi.abs() * 0.05).max(1e-9);
        ((lo - pad).min(0.0f64.max(lo - pad)), hi + pad)
    }
}

/// Draws the series and returns the SVG document.
pub fn line_chart(axes: &Axes, series: &[Series]) -> CliResult<String> {
    let data: Vec<Vec<(f64, f64)>> = series.iter().map(|s| usable(&s.points, axes.x_log, axes.y_log)).collect();
    let (x0, x1) = bounds(data.iter().flatten().map(|p| p.0), axes.x_log);
    let (y0, y1) = bounds(data.iter().flatten().map(|p| p.1), axes.y_log);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder.caption(axes.title, ("sans-serif", 20)).margin(16).x_label_area_size(48).y_label_area_size(90);
        // Four coordinate combinations; a macro keeps one drawing body.
        macro_rules! draw {
            ($x:expr, $y:expr) => {{
                let mut chart = builder.build_cartesian_2d($x, $y)?;
                chart
                    .configure_mesh()
                    .x_desc(axes.x_label)
                    .y_desc(axes.y_label)
                    .y_label_formatter(&|v| short(*v))
                    .x_label_formatter(&|v| short(*v))
                    .draw()?;
                for (i, (s, pts)) in series.iter().zip(&data).enumerate() {
                    if pts.is_empty() {
                        continue;
                    }
                    let color = PALETTE[i % PALETTE.len()];
                    let style = ShapeStyle::from(&color).stroke_width(2);
                    let drawn = if s.published {
                        chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))?
                    } else {
                        chart.draw_series(LineSeries::new(pts.iter().copied(), style))?
                    };
                    drawn
                        .label(s.name.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
                    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .position(axes.legend.clone())
                    .draw()?;
            }};
        }
        match (axes.x_log, axes.y_log) {
            (true, true) => draw!((x0..x1).log_scale(), (y0..y1).log_scale()),
            (true, false) => draw!((x0..x1).log_scale(), y0..y1),
            (false, true) => draw!(x0..x1, (y0..y1).log_scale()),
            (false, false) => draw!(x0..x1, y0..y1),
        }
        root.present()?;
    }
    Ok(svg)
}

/// One panel of a bar chart: a value per named bar.
pub struct Panel<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub bars: Vec<(String, f64)>,
}

/// Side-by-side bar charts in one SVG; a bar that could not be measured
/// (NaN) is left out and its name kept on the axis.
pub fn bar_panels(panels: &[Panel]) -> CliResult<String> {
    let mut svg = String::new();
    {
        let width = 480 * panels.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut svg, (width, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let areas = root.split_evenly((1, panels.len().max(1)));
        for (panel, area) in panels.iter().zip(areas.iter()) {
            let n = panel.bars.len().max(1);
            let top = panel.bars.iter().map(|b| b.1).filter(|v| v.is_finite()).fold(0.0f64, f64::max);
            let top = if top > 0.0 { top * 1.15 } else { 1.0 };
            let names: Vec<String> = panel.bars.iter().map(|b| b.0.clone()).collect();
            let mut chart = ChartBuilder::on(area)
                .caption(panel.title, ("sans-serif", 18))
                .margin(14)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d((0..n).into_segmented(), 0.0..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_desc(panel.y_label)
                .y_label_formatter(&|v| short(*v))
                .x_labels(n)
                .x_label_formatter(&|x| match x {
                    SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                    _ => String::new(),
                })
                .draw()?;
            for (i, (_, v)) in panel.bars.iter().enumerate() {
                if !v.is_finite() {
                    continue;
                }
                let color = PALETTE[i % PALETTE.len()];
                let bar = Rectangle::new(
                    [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *v)],
                    color.mix(0.8).filled(),
                );
                chart.draw_series(std::iter::once(bar))?;
                chart.draw_series(std::iter::once(Text::new(
                    short(*v),
                    (SegmentValue::CenterOf(i), *v),
                    ("sans-serif", 13).into_font(),
                )))?;
            }
        }
        root.present()?;
    }
    Ok(svg)
}

/// One series of a grouped bar chart: a (value, min, max) per group;
/// NaN where it was not measured.
pub struct BarSeries {
    pub name: String,
    pub values: Vec<(f64, f64, f64)>,
}

/// Bars grouped along x (one group per name in `groups`), one colour per
/// series, each bar with a whisker from its min to its max, and a legend.
pub fn grouped_bars(
    title: &str,
    x_label: &str,
    y_label: &str,
    groups: &[String],
    series: &[BarSeries],
) -> CliResult<String> {
    let k = series.len().max(1);
    // Each group takes k slots for its bars and one empty slot after them.
    let slots = groups.len().max(1) * (k + 1);
    let top = series
        .iter()
        .flat_map(|s| s.values.iter().flat_map(|&(v, _, hi)| [v, hi]))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1100, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((0..slots).into_segmented(), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .y_label_formatter(&|v| short(*v))
            .x_labels(slots)
            .x_label_formatter(&|x| match x {
                // The group's name under the middle of its bars.
                SegmentValue::CenterOf(j) if j % (k + 1) == (k - 1) / 2 => {
                    groups.get(j / (k + 1)).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let bars: Vec<Rectangle<(SegmentValue<usize>, f64)>> = s
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.0.is_finite())
                .map(|(g, &(v, _, _))| {
                    let slot = g * (k + 1) + i;
                    Rectangle::new(
                        [(SegmentValue::Exact(slot), 0.0), (SegmentValue::Exact(slot + 1), v)],
                        color.mix(0.85).filled(),
                    )
                })
                .collect();
            chart
                .draw_series(bars)?
                .label(s.name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
            let whiskers = s.values.iter().enumerate().filter(|(_, v)| v.1.is_finite() && v.2.is_finite()).map(
                |(g, &(_, lo, hi))| {
                    let at = || SegmentValue::CenterOf(g * (k + 1) + i);
                    PathElement::new(vec![(at(), lo), (at(), hi)], BLACK.stroke_width(1))
                },
            );
            chart.draw_series(whiskers)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Axis labels: 1, 10, 1k, 10k, 1M ...
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.2}", v / 1e3)) + "k"
    } else if a >= 1.0 || a == 0.0 {
        trim(format!("{v:.2}"))
    } else {
        format!("{v:.3}")
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_every_series_in_its_legend() {
        let series = vec![
            Series { name: "epoll".into(), points: vec![(1.0, 7e5), (1e4, 7e5)], published: false },
            Series {
                name: "book-poll".into(),
                points: vec![(1.0, 3e5), (1e4, 300.0), (2e4, f64::NAN)],
                published: true,
            },
        ];
        let axes = Axes {
            title: "t",
            x_label: "fds",
            y_label: "calls/s",
            x_log: true,
            y_log: true,
            legend: SeriesLabelPosition::UpperRight,
        };
        let svg = line_chart(&axes, &series).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("epoll") && svg.contains("book-poll"));
    }

    #[test]
    fn bar_panels_name_every_bar() {
        let panels = [Panel { title: "t", y_label: "s", bars: vec![("poll".into(), 2.0), ("epoll".into(), f64::NAN)] }];
        let svg = bar_panels(&panels).unwrap();
        assert!(svg.contains("poll") && svg.contains("epoll"));
    }

    #[test]
    fn grouped_bars_name_every_group_and_series() {
        let series = [
            BarSeries { name: "iomux-epoll".into(), values: vec![(2.0, 1.5, 2.5), (f64::NAN, f64::NAN, f64::NAN)] },
            BarSeries { name: "tokio".into(), values: vec![(3.0, 3.0, 3.0), (4.0, 3.5, 4.5)] },
        ];
        let svg = grouped_bars("t", "scenario", "us", &["closed-100".into(), "open-1000".into()], &series).unwrap();
        for name in ["iomux-epoll", "tokio", "closed-100", "open-1000"] {
            assert!(svg.contains(name), "{name}");
        }
    }

    #[test]
    fn short_labels() {
        assert_eq!(short(1.0), "1");
        assert_eq!(short(1000.0), "1k");
        assert_eq!(short(2_500_000.0), "2.5M");
    }
}
