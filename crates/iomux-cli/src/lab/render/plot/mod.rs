//! SVG plots (plotters' SVG backend: no fonts or system libraries).
//!
//! A series or bar takes its colour and marker from its name ([`look`]), so
//! a backend looks the same in every figure; legends sit beside the
//! plotting area, never on the data.

use crate::lab::harness::envelope::Envelope;
use crate::CliResult;
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

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
}

/// One panel of a line figure; the panels of a figure are stacked and
/// share both axes' ranges, so a given N sits at the same x in each and a
/// height reads the same.
pub struct LinePanel<'a> {
    pub title: &'a str,
    pub series: &'a [Series],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Diamond,
    Triangle,
    InvTriangle,
    Cross,
    Plus,
}

/// How a named series or bar is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Look {
    pub color: RGBColor,
    pub marker: Marker,
    /// An outlined marker: a raw syscall loop, beside the backend built on it.
    pub hollow: bool,
    /// A published figure (`book-X`, `paper X`): dashed, in X's colour.
    pub published: bool,
}

// Okabe-Ito, plus Paul Tol's muted colours for the names beyond its eight
// (both colour-blind safe); Okabe-Ito's yellow is left out (too pale on white).
const VERMILLION: RGBColor = RGBColor(213, 94, 0);
const PURPLE: RGBColor = RGBColor(204, 121, 167);
const BLUE: RGBColor = RGBColor(0, 114, 178);
const SKY: RGBColor = RGBColor(86, 180, 233);
const GREEN: RGBColor = RGBColor(0, 158, 115);
const DARK_GREEN: RGBColor = RGBColor(17, 119, 51);
const ORANGE: RGBColor = RGBColor(230, 159, 0);
const INDIGO: RGBColor = RGBColor(51, 34, 136);
const OLIVE: RGBColor = RGBColor(153, 153, 51);
const ROSE: RGBColor = RGBColor(204, 102, 119);
const WINE: RGBColor = RGBColor(136, 34, 85);
const BROWN: RGBColor = RGBColor(140, 98, 57);
const GREY: RGBColor = RGBColor(136, 136, 136);

/// The colour and marker of a backend, server or measured subject, the same
/// in every plot: `iomux-epoll` is drawn as `epoll`, `raw-epoll` in epoll's
/// colour with an outlined marker, `book-epoll` and `paper epoll` dashed in
/// epoll's colour. Other names get a colour from a hash of the name.
pub fn look(name: &str) -> Look {
    let (published, name) = match ["book-", "paper "].iter().find_map(|p| name.strip_prefix(p)) {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    let (hollow, name) = match name.strip_prefix("raw-") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    let name = name.strip_prefix("iomux-").unwrap_or(name);
    use Marker::*;
    let (color, marker) = match name {
        "select" => (PURPLE, Diamond),
        "poll" => (VERMILLION, Square),
        "epoll" => (BLUE, Circle),
        "epoll-et" => (SKY, Triangle),
        "uring" | "uring-enter" => (GREEN, InvTriangle),
        "uring-sqpoll" => (DARK_GREEN, Cross),
        "null-syscall" => (GREY, Plus),
        "mio" => (INDIGO, Triangle),
        "polling" => (OLIVE, Cross),
        "tokio" => (ORANGE, Square),
        "monoio-uring" => (ROSE, InvTriangle),
        "monoio-legacy" => (WINE, Diamond),
        "compio" => (BROWN, Triangle),
        // Grey for the floors others are measured against.
        "c-epoll" => (GREY, Circle),
        _ => hashed(name),
    };
    Look { color, marker, hollow, published }
}

/// [`look`], dashed also when the caller marks the series published.
fn look_of(name: &str, published: bool) -> Look {
    let l = look(name);
    Look { published: published || l.published, ..l }
}

/// FNV-1a of the name picks a hue (at a lightness readable on white) and a
/// marker: stable across runs and orderings.
fn hashed(name: &str) -> (RGBColor, Marker) {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let hue = (h % 360) as f64 / 360.0;
    let (r, g, b) = HSLColor(hue, 0.7, 0.38).rgb();
    const MARKERS: [Marker; 7] = [
        Marker::Circle,
        Marker::Square,
        Marker::Diamond,
        Marker::Triangle,
        Marker::InvTriangle,
        Marker::Cross,
        Marker::Plus,
    ];
    (RGBColor(r, g, b), MARKERS[((h >> 32) % 7) as usize])
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

const FONT: &str = "sans-serif";
/// plotters' SVG backend writes font sizes at 1/1.24 of the size asked for.
const TITLE_PT: u32 = 24;
const CAPTION_PT: u32 = 19;
const LABEL_PT: u32 = 16;
const TICK_PT: u32 = 15;
const MARKER_R: i32 = 5;
const LEGEND_ROW: i32 = 26;
const LEGEND_TOP: i32 = 48;

/// A marker centred at `at` (pixels of `area`).
fn marker(area: &Area, (x, y): (i32, i32), look: &Look) -> CliResult<()> {
    let (c, r) = (look.color, MARKER_R);
    let outline = match look.marker {
        Marker::Circle => {
            if look.hollow {
                area.draw(&Circle::new((x, y), r, WHITE.filled()))?;
                area.draw(&Circle::new((x, y), r, c.stroke_width(2)))?;
            } else {
                area.draw(&Circle::new((x, y), r, c.filled()))?;
            }
            return Ok(());
        }
        Marker::Cross | Marker::Plus => {
            let strokes = if look.marker == Marker::Cross {
                [[(x - r, y - r), (x + r, y + r)], [(x - r, y + r), (x + r, y - r)]]
            } else {
                [[(x - r - 1, y), (x + r + 1, y)], [(x, y - r - 1), (x, y + r + 1)]]
            };
            for s in strokes {
                area.draw(&PathElement::new(s.to_vec(), c.stroke_width(3)))?;
            }
            return Ok(());
        }
        Marker::Square => {
            vec![(x - r + 1, y - r + 1), (x + r - 1, y - r + 1), (x + r - 1, y + r - 1), (x - r + 1, y + r - 1)]
        }
        Marker::Diamond => vec![(x, y - r - 2), (x + r + 1, y), (x, y + r + 2), (x - r - 1, y)],
        Marker::Triangle => vec![(x, y - r - 1), (x + r + 1, y + r), (x - r - 1, y + r)],
        Marker::InvTriangle => vec![(x, y + r + 1), (x + r + 1, y - r), (x - r - 1, y - r)],
    };
    if look.hollow {
        area.draw(&Polygon::new(outline.clone(), WHITE.filled()))?;
        let closed: Vec<(i32, i32)> = outline.iter().chain(outline.first()).copied().collect();
        area.draw(&PathElement::new(closed, c.stroke_width(2)))?;
    } else {
        area.draw(&Polygon::new(outline, c.filled()))?;
    }
    Ok(())
}

/// A bar from `rect` (pixels); a published figure light with a dashed edge.
fn bar(area: &Area, rect: [(i32, i32); 2], look: &Look) -> CliResult<()> {
    if look.published {
        let [(x0, y0), (x1, y1)] = rect;
        area.draw(&Rectangle::new(rect, look.color.mix(0.25).filled()))?;
        let edge = vec![(x0, y1), (x0, y0), (x1, y0), (x1, y1)];
        area.draw(&DashedPathElement::new(edge, 6, 4, look.color.stroke_width(2)))?;
    } else {
        area.draw(&Rectangle::new(rect, look.color.mix(0.9).filled()))?;
    }
    Ok(())
}

fn text_style(pt: u32, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle::from((FONT, pt).into_font()).pos(Pos::new(h, v))
}

/// What a legend entry shows beside its name.
#[derive(Clone, Copy, PartialEq)]
enum Key {
    /// A stretch of line (dashed when published) with the marker on it.
    Line,
    /// A patch of the bar's colour.
    Swatch,
}

/// Pixels a legend column needs for these names (the backend has no font
/// metrics: about 0.6 em a character at [`LABEL_PT`]).
fn legend_width<'a>(names: impl Iterator<Item = &'a str>) -> u32 {
    let longest = names.map(|n| n.chars().count()).max().unwrap_or(0) as u32;
    64 + longest * 8
}

/// A legend down `area`, one row a name, starting level with the plot's top.
fn legend(area: &Area, names: &[(&str, bool)], key: Key) -> CliResult<()> {
    for (i, &(name, published)) in names.iter().enumerate() {
        let y = LEGEND_TOP + i as i32 * LEGEND_ROW;
        let l = look_of(name, published);
        match key {
            Key::Line if l.published => {
                area.draw(&DashedPathElement::new(vec![(6, y), (42, y)], 6, 4, l.color.stroke_width(2)))?
            }
            Key::Line => area.draw(&PathElement::new(vec![(6, y), (42, y)], l.color.stroke_width(2)))?,
            Key::Swatch => bar(area, [(14, y - 8), (34, y + 8)], &l)?,
        }
        if key == Key::Line {
            marker(area, (24, y), &l)?;
        }
        area.draw(&Text::new(name.to_string(), (50, y), text_style(LABEL_PT, HPos::Left, VPos::Center)))?;
    }
    Ok(())
}

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
    line_panels(axes, &[LinePanel { title: "", series }])
}

/// Line panels one above the other in one SVG (side by side they would not
/// fit the report's column at a readable size), each with its legend to
/// its right.
pub fn line_panels(axes: &Axes, panels: &[LinePanel]) -> CliResult<String> {
    const PLOT_W: u32 = 820;
    const PANEL_H: u32 = 560;
    let data: Vec<Vec<Vec<(f64, f64)>>> =
        panels.iter().map(|p| p.series.iter().map(|s| usable(&s.points, axes.x_log, axes.y_log)).collect()).collect();
    let all = || data.iter().flatten().flatten();
    let (x0, x1) = bounds(all().map(|p| p.0), axes.x_log);
    let (y0, y1) = bounds(all().map(|p| p.1), axes.y_log);
    let legend_w = legend_width(panels.iter().flat_map(|p| p.series.iter().map(|s| s.name.as_str())));
    let rows = panels.iter().map(|p| p.series.len()).max().unwrap_or(0) as u32;
    let n = panels.len().max(1) as u32;
    let panel_h = PANEL_H.max(LEGEND_TOP as u32 + rows * LEGEND_ROW as u32 + 40);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (PLOT_W + legend_w, n * panel_h + 40)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(axes.title, (FONT, TITLE_PT))?;
        for ((panel, pts), column) in panels.iter().zip(&data).zip(body.split_evenly((n as usize, 1))) {
            let (plot_area, legend_area) = column.split_horizontally(PLOT_W);
            let mut builder = ChartBuilder::on(&plot_area);
            if !panel.title.is_empty() {
                builder.caption(panel.title, (FONT, CAPTION_PT));
            }
            builder.margin(14).x_label_area_size(60).y_label_area_size(100);
            // Four coordinate combinations; a macro keeps one drawing body.
            macro_rules! draw {
                ($x:expr, $y:expr) => {{
                    let mut chart = builder.build_cartesian_2d($x, $y)?;
                    chart
                        .configure_mesh()
                        .x_desc(axes.x_label)
                        .y_desc(axes.y_label)
                        .label_style((FONT, TICK_PT))
                        .axis_desc_style((FONT, LABEL_PT))
                        .y_label_formatter(&|v| short(*v))
                        .x_label_formatter(&|v| short(*v))
                        .draw()?;
                    let mut markers = Vec::new();
                    for (s, pts) in panel.series.iter().zip(pts) {
                        let l = look_of(&s.name, s.published);
                        let style = l.color.stroke_width(2);
                        if l.published {
                            chart.draw_series(DashedLineSeries::new(pts.iter().copied(), 8, 5, style))?;
                        } else {
                            chart.draw_series(LineSeries::new(pts.iter().copied(), style))?;
                        }
                        // In pixels of the root, where chart coordinates map to.
                        markers.extend(pts.iter().map(|p| (chart.backend_coord(p), l)));
                    }
                    // Markers over all lines, thin crosses last: where two
                    // series run level, both still show.
                    markers.sort_by_key(|(_, l)| (matches!(l.marker, Marker::Cross | Marker::Plus), l.hollow));
                    for (at, l) in &markers {
                        marker(&root, *at, l)?;
                    }
                }};
            }
            match (axes.x_log, axes.y_log) {
                (true, true) => draw!((x0..x1).log_scale(), (y0..y1).log_scale()),
                (true, false) => draw!((x0..x1).log_scale(), y0..y1),
                (false, true) => draw!(x0..x1, (y0..y1).log_scale()),
                (false, false) => draw!(x0..x1, y0..y1),
            }
            let names: Vec<(&str, bool)> = panel.series.iter().map(|s| (s.name.as_str(), s.published)).collect();
            legend(&legend_area, &names, Key::Line)?;
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

/// Bar charts in one SVG, side by side while they fit the report's column,
/// then on further rows; each bar in its name's colour (see [`look`]) and
/// as wide as its name; a bar that could not be measured (NaN) is marked
/// n/a.
pub fn bar_panels(panels: &[Panel]) -> CliResult<String> {
    const ROW_H: u32 = 460;
    const MAX_W: u32 = 1300;
    const Y_AREA: u32 = 84;
    // Each panel's place: (x, y, width).
    let mut places = Vec::new();
    let (mut x, mut y, mut width) = (0, 0, 0);
    for p in panels {
        let slot = p.bars.iter().map(|b| b.0.chars().count() as u32 * 7 + 16).max().unwrap_or(0).max(64);
        let title = p.title.chars().count() as u32 * 9 + 40;
        let w = (Y_AREA + 30 + slot * p.bars.len().max(1) as u32).max(title).max(360);
        if x > 0 && x + w > MAX_W {
            (x, y) = (0, y + ROW_H);
        }
        places.push((x, y, w));
        x += w;
        width = width.max(x);
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width.max(360), y + ROW_H)).into_drawing_area();
        root.fill(&WHITE)?;
        for (panel, &(x, y, w)) in panels.iter().zip(&places) {
            let area = root.clone().shrink((x, y), (w, ROW_H));
            let n = panel.bars.len().max(1);
            let top = panel.bars.iter().map(|b| b.1).filter(|v| v.is_finite()).fold(0.0f64, f64::max);
            let top = if top > 0.0 { top * 1.15 } else { 1.0 };
            let names: Vec<String> = panel.bars.iter().map(|b| b.0.clone()).collect();
            let mut chart = ChartBuilder::on(&area)
                .caption(panel.title, (FONT, CAPTION_PT))
                .margin(14)
                .x_label_area_size(44)
                .y_label_area_size(Y_AREA)
                .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_desc(panel.y_label)
                .label_style((FONT, TICK_PT))
                .axis_desc_style((FONT, LABEL_PT))
                .y_label_formatter(&|v| short(*v))
                .x_labels(n)
                .x_label_formatter(&|x| match x {
                    SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                    _ => String::new(),
                })
                .draw()?;
            for (i, (name, v)) in panel.bars.iter().enumerate() {
                let base = chart.backend_coord(&(SegmentValue::Exact(i), 0.0));
                let end = chart.backend_coord(&(SegmentValue::Exact(i + 1), if v.is_finite() { *v } else { 0.0 }));
                let inset = (end.0 - base.0) / 7;
                let mid = (base.0 + end.0) / 2;
                if !v.is_finite() {
                    root.draw(&Text::new("n/a", (mid, base.1 - 4), text_style(TICK_PT, HPos::Center, VPos::Bottom)))?;
                    continue;
                }
                bar(&root, [(base.0 + inset, end.1), (end.0 - inset, base.1)], &look(name))?;
                root.draw(&Text::new(short(*v), (mid, end.1 - 4), text_style(TICK_PT, HPos::Center, VPos::Bottom)))?;
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

impl BarSeries {
    /// A series named `name`: for each of `arms`, the median of `figure`
    /// over its kept samples, whiskers its 95% interval (NaN where none).
    pub fn of<P, K: PartialEq, S>(
        name: impl std::fmt::Display,
        env: &Envelope<P, K, S>,
        arms: impl IntoIterator<Item = K>,
        figure: impl Fn(&S) -> f64,
    ) -> BarSeries {
        let values = arms
            .into_iter()
            .map(|arm| env.estimate(&arm, &figure).map_or((f64::NAN, f64::NAN, f64::NAN), |e| (e.median, e.lo, e.hi)))
            .collect();
        BarSeries { name: name.to_string(), values }
    }
}

/// One series per server and one group per `(name, key)` of `groups`:
/// each bar `figure` of the arm `arm(server, key)`, drawn by
/// [`grouped_bars`] with its `(title, x label, y label)`.
pub fn bars_per_server<P, K: PartialEq, S, V: Copy + std::fmt::Display, G>(
    env: &Envelope<P, K, S>,
    servers: &[V],
    groups: Vec<(String, G)>,
    arm: impl Fn(V, &G) -> K,
    figure: impl Fn(&S) -> f64 + Copy,
    (title, x_label, y_label): (&str, &str, &str),
) -> CliResult<String> {
    let series: Vec<BarSeries> =
        servers.iter().map(|&v| BarSeries::of(v, env, groups.iter().map(|(_, g)| arm(v, g)), figure)).collect();
    let names: Vec<String> = groups.into_iter().map(|(n, _)| n).collect();
    grouped_bars(title, x_label, y_label, &names, &series)
}

/// Bars grouped along x (one group per name in `groups`), a bar per series
/// in its name's colour, each with a whisker from its min to its max, and
/// a legend to the right.
pub fn grouped_bars(
    title: &str,
    x_label: &str,
    y_label: &str,
    groups: &[String],
    series: &[BarSeries],
) -> CliResult<String> {
    const PLOT_W: u32 = 1040;
    let k = series.len().max(1);
    // Each group takes k slots for its bars and one empty slot after them.
    let slots = groups.len().max(1) * (k + 1);
    let top = series
        .iter()
        .flat_map(|s| s.values.iter().flat_map(|&(v, _, hi)| [v, hi]))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let legend_w = legend_width(series.iter().map(|s| s.name.as_str()));
    let height = 580.max(LEGEND_TOP as u32 + series.len() as u32 * LEGEND_ROW as u32 + 80);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (PLOT_W + legend_w, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(title, (FONT, TITLE_PT))?;
        let (plot_area, legend_area) = body.split_horizontally(PLOT_W);
        let mut chart = ChartBuilder::on(&plot_area)
            .margin(16)
            .x_label_area_size(60)
            .y_label_area_size(90)
            .build_cartesian_2d((0..slots - 1).into_segmented(), 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style((FONT, TICK_PT))
            .axis_desc_style((FONT, LABEL_PT))
            .y_label_formatter(&|v| short(*v))
            .x_labels(slots)
            .x_label_formatter(&|_| String::new())
            .draw()?;
        // Each group's name centred under its bars (not under a slot: with an
        // even number of bars the middle is between two).
        for (g, name) in groups.iter().enumerate() {
            let from = chart.backend_coord(&(SegmentValue::Exact(g * (k + 1)), 0.0));
            let to = chart.backend_coord(&(SegmentValue::Exact(g * (k + 1) + k), 0.0));
            let style = text_style(TICK_PT, HPos::Center, VPos::Top);
            root.draw(&Text::new(name.clone(), ((from.0 + to.0) / 2, from.1 + 10), style))?;
        }
        for (i, s) in series.iter().enumerate() {
            let l = look(&s.name);
            for (g, &(v, lo, hi)) in s.values.iter().enumerate() {
                let slot = g * (k + 1) + i;
                if v.is_finite() {
                    let base = chart.backend_coord(&(SegmentValue::Exact(slot), 0.0));
                    let end = chart.backend_coord(&(SegmentValue::Exact(slot + 1), v));
                    bar(&root, [(base.0 + 1, end.1), (end.0 - 1, base.1)], &l)?;
                }
                if lo.is_finite() && hi.is_finite() {
                    let at = || SegmentValue::CenterOf(slot);
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(at(), lo), (at(), hi)],
                        BLACK.stroke_width(2),
                    )))?;
                }
            }
        }
        let names: Vec<(&str, bool)> = series.iter().map(|s| (s.name.as_str(), false)).collect();
        legend(&legend_area, &names, Key::Swatch)?;
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
        // Three significant digits: 0.5, 0.021.
        let digits = (2.0 - a.log10().floor()).clamp(1.0, 9.0) as usize;
        trim(format!("{v:.digits$}"))
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
mod tests;
