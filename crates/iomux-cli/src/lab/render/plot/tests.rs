//! Tests of the plots: scales, axes, legends and the SVG they write.

use super::*;

#[test]
fn chart_has_every_series_in_its_legend() {
    let series = vec![
        Series { name: "epoll".into(), points: vec![(1.0, 7e5), (1e4, 7e5)], published: false },
        Series { name: "book-poll".into(), points: vec![(1.0, 3e5), (1e4, 300.0), (2e4, f64::NAN)], published: true },
    ];
    let axes = Axes { title: "t", x_label: "fds", y_label: "calls/s", x_log: true, y_log: true };
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

fn hex(name: &str) -> String {
    let RGBColor(r, g, b) = look(name).color;
    format!("#{r:02X}{g:02X}{b:02X}")
}

fn line(name: &str, published: bool) -> Series {
    Series { name: name.into(), points: vec![(1.0, 10.0), (100.0, 20.0)], published }
}

const AXES: Axes = Axes { title: "t", x_label: "x (N)", y_label: "y (s)", x_log: false, y_log: false };

/// (x, text) of every `<text>` element.
fn texts(svg: &str) -> Vec<(f64, String)> {
    svg.split("<text ")
        .skip(1)
        .filter_map(|t| {
            let x = t.split("x=\"").nth(1)?.split('"').next()?.parse().ok()?;
            let body = t.split_once('>')?.1.split("</text>").next()?;
            Some((x, body.trim().to_string()))
        })
        .collect()
}

#[test]
fn a_name_has_one_colour_in_every_chart_whatever_its_place() {
    let epoll = hex("epoll");
    assert_eq!(hex("iomux-epoll"), epoll);
    assert_eq!(hex("raw-epoll"), epoll);
    assert_eq!(hex("book-epoll"), epoll);
    assert_ne!(hex("poll"), epoll);
    assert!(look("raw-epoll").hollow && !look("epoll").hollow);
    // An unknown name: from its hash, so the same in every run.
    assert_eq!(look("send_zc"), look("send_zc"));
    assert_ne!(hex("send_zc"), hex("min_wait"));

    let lines = line_chart(&AXES, &[line("poll", false), line("epoll", false)]).unwrap();
    assert!(lines.contains(&format!("stroke=\"{epoll}\"")));
    let without = line_chart(&AXES, &[line("poll", false)]).unwrap();
    assert!(!without.contains(&epoll));
    let bars =
        bar_panels(&[Panel { title: "t", y_label: "s", bars: vec![("epoll".into(), 2.0), ("poll".into(), 1.0)] }])
            .unwrap();
    assert!(bars.contains(&format!("fill=\"{epoll}\"")));
    let series = [
        BarSeries { name: "tokio".into(), values: vec![(1.0, 1.0, 1.0)] },
        BarSeries { name: "iomux-epoll".into(), values: vec![(2.0, 1.5, 2.5)] },
    ];
    let grouped = grouped_bars("t", "x", "y", &["g".into()], &series).unwrap();
    assert!(grouped.contains(&format!("fill=\"{epoll}\"")));
}

#[test]
fn published_series_are_dashed() {
    let polylines = |svg: &str| {
        let stroke = format!("stroke=\"{}\"", hex("epoll"));
        svg.lines().filter(|l| l.starts_with("<polyline") && l.contains(&stroke)).count()
    };
    // One polyline for the line, one for its legend sample.
    let solid = polylines(&line_chart(&AXES, &[line("epoll", false)]).unwrap());
    assert_eq!(solid, 2);
    for dashed in [line("epoll", true), line("book-epoll", false)] {
        let dashes = polylines(&line_chart(&AXES, &[dashed]).unwrap());
        assert!(dashes > solid + 8, "{dashes} dashes");
    }
}

#[test]
fn svgs_scale_with_a_view_box() {
    let svgs = [
        line_chart(&AXES, &[line("epoll", false)]).unwrap(),
        bar_panels(&[Panel { title: "t", y_label: "s", bars: vec![("poll".into(), 2.0)] }]).unwrap(),
        grouped_bars(
            "t",
            "x",
            "y",
            &["g".into()],
            &[BarSeries { name: "tokio".into(), values: vec![(1.0, 1.0, 1.0)] }],
        )
        .unwrap(),
    ];
    for svg in svgs {
        let open = svg.split('>').next().unwrap_or_default();
        let attr = |name: &str| open.split(&format!(" {name}=\"")).nth(1).and_then(|v| v.split('"').next());
        let (w, h) = (attr("width").unwrap(), attr("height").unwrap());
        assert_eq!(attr("viewBox"), Some(format!("0 0 {w} {h}").as_str()), "{open}");
    }
}

#[test]
fn legends_sit_right_of_the_plotting_area() {
    // The grid's lines span the plotting area; a legend inside it (as
    // plotters places one) would start left of their right end.
    let right_edge = |svg: &str| {
        svg.split("<line ")
            .skip(1)
            .flat_map(|l| {
                ["x1", "x2"].map(|a| l.split(&format!("{a}=\"")).nth(1)?.split('"').next()?.parse::<f64>().ok())
            })
            .flatten()
            .fold(0.0, f64::max)
    };
    let names = ["select", "poll", "epoll", "epoll-et", "uring", "book-poll"];
    let series: Vec<Series> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Series { name: n.to_string(), points: vec![(0.0, 0.0), (1e4, i as f64)], published: false })
        .collect();
    let lines = line_chart(&AXES, &series).unwrap();
    let series: Vec<BarSeries> =
        names.iter().map(|n| BarSeries { name: n.to_string(), values: vec![(1.0, 0.5, 1.5)] }).collect();
    let bars = grouped_bars("t", "x", "y", &["g".into()], &series).unwrap();
    for svg in [lines, bars] {
        let edge = right_edge(&svg);
        assert!(edge > 500.0, "{edge}");
        let texts = texts(&svg);
        for name in names {
            let (x, _) = texts.iter().find(|t| t.1 == name).unwrap();
            assert!(*x > edge, "{name} at x = {x}, plot area ends at {edge}");
        }
    }
}

#[test]
fn short_labels() {
    assert_eq!(short(1.0), "1");
    assert_eq!(short(1000.0), "1k");
    assert_eq!(short(2_500_000.0), "2.5M");
    assert_eq!(short(0.5), "0.5");
    assert_eq!(short(0.0213), "0.0213");
}
