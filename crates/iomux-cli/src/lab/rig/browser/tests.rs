//! Tests of the headless browser's screenshot and checks.

use super::*;

/// The check's result, or None after saying why it was skipped.
fn checked(report: &Path, shot: &Path) -> Option<BrowserCheck> {
    match check(report, shot) {
        Ok(c) => Some(c),
        Err(BrowserError::Missing(why)) => {
            // CI installs Chromium first (.ci/run): there, missing is a failure.
            assert!(std::env::var("CI").is_err(), "CI=true but {why}");
            // Straight to the stderr handle: libtest captures eprintln!
            // of a passing test, and a skip must be seen.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "skipped: {why}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn browser_renders_the_fixture_report_cleanly() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results");
    let dir = PrivateDir::new("iomux-browser-test", "a report to render").unwrap();
    for entry in std::fs::read_dir(&fixture).unwrap() {
        let path = entry.unwrap().path();
        if matches!(path.extension().and_then(|e| e.to_str()), Some("md" | "svg" | "json")) {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let report = crate::lab::report(dir.path()).unwrap().0;
    let shot = dir.path().join("screenshot.png");
    let Some(c) = checked(&report, &shot) else { return };

    assert!(c.errors.is_empty(), "page errors: {:#?}", c.errors);
    let plotted = crate::lab::registry::ENTRIES
        .iter()
        .filter(|e| {
            fixture.join(format!("{}.json", e.name)).exists() && fixture.join(format!("{}.svg", e.name)).exists()
        })
        .count();
    // The first plot also stands beside the verdicts.
    assert_eq!(c.plots.len(), plotted + 1, "one figure per experiment with a plot, and the headline: {:#?}", c.plots);
    for p in &c.plots {
        assert!(p.is_drawn(), "empty plot: {p:?}");
    }
    assert_eq!(c.screenshot, shot);
    assert_eq!(png_size(&c.screenshot), VIEWPORT);
    let v = c.verdicts.as_ref().expect("report.html has no id=\"verdicts\" element");
    assert_eq!(v.tag, "section", "{v:?}");
    assert!(v.first_section, "id=\"verdicts\" is not the first section: {v:?}");
    assert!(v.top < f64::from(VIEWPORT.1), "the verdicts start below the first screen: {v:?}");
    assert!(
        c.first_screen.summary_and_first_plot_fit,
        "the summary and the first plot must show without scrolling at {VIEWPORT:?}: {:?}",
        c.first_screen
    );
    eprintln!(
        "measured at {:?} (screenshot {VIEWPORT:?}); first screen ({} px): verdicts end at {:?}, the first plot at {:?}; both fit: {}",
        c.measured_viewport,
        c.first_screen.height,
        c.first_screen.verdicts_bottom,
        c.first_screen.first_figure_bottom,
        c.first_screen.summary_and_first_plot_fit
    );
}

#[test]
fn browser_reports_a_broken_page() {
    let dir = PrivateDir::new("iomux-browser-test", "a broken page").unwrap();
    let page = dir.path().join("broken.html");
    std::fs::write(
        &page,
        "<!doctype html><html><head><title>broken</title></head><body><h1>broken</h1>\
         <script>throw new Error('boom from the page')</script>\
         <img src=\"https://example.com/remote.png\" alt=\"\">\
         <figure><svg></svg></figure></body></html>",
    )
    .unwrap();
    let shot = dir.path().join("broken.png");
    let Some(c) = checked(&page, &shot) else { return };

    let said = |kind: &str, text: &str| c.errors.iter().any(|e| e.kind == kind && e.message.contains(text));
    let line = format!("boom from the page ({}:1)", file_url(&std::fs::canonicalize(&page).unwrap()));
    assert!(said("uncaught", &line), "{:#?}", c.errors);
    assert!(!said("console", "boom"), "reported twice: {:#?}", c.errors);
    assert!(said("network", "https://example.com/remote.png"), "{:#?}", c.errors);
    assert!(said("resource", "https://example.com/remote.png"), "{:#?}", c.errors);
    assert_eq!(c.plots.len(), 1);
    assert!(c.plots[0].has_svg && !c.plots[0].is_drawn(), "{:?}", c.plots[0]);
    assert!(c.verdicts.is_none());
    assert!(!c.first_screen.summary_and_first_plot_fit);
    let problems = c.problems();
    eprintln!("the broken page's problems: {problems:#?}");
    assert!(problems.iter().any(|p| p.contains("empty plot")), "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("verdicts")), "{problems:#?}");
    assert_eq!(png_size(&shot), VIEWPORT);
}

#[test]
fn browser_measures_the_first_screen() {
    let dir = PrivateDir::new("iomux-browser-test", "a summary page").unwrap();
    let page = dir.path().join("summary.html");
    let plot =
        |h: u32| format!("<figure><svg width=\"600\" height=\"{h}\"><rect width=\"10\" height=\"10\"/></svg></figure>");
    std::fs::write(
        &page,
        format!(
            "<!doctype html><html><head><title>t</title><style>body {{ margin: 0 }}</style></head><body>\
             <h1>report</h1><p>machine</p><section id=\"verdicts\"><p>all good</p>{}</section>\
             <section id=\"e1\">{}</section></body></html>",
            plot(100),
            plot(2000)
        ),
    )
    .unwrap();
    let Some(c) = checked(&page, &dir.path().join("summary.png")) else { return };

    assert!(c.problems().is_empty(), "{:#?}", c.problems());
    let v = c.verdicts.as_ref().unwrap();
    assert!(v.first_section && v.top > 0.0 && v.bottom < f64::from(VIEWPORT.1), "{v:?}");
    assert_eq!(c.plots.len(), 2);
    assert_eq!((c.plots[0].section.as_deref(), c.plots[0].width, c.plots[0].height), (Some("verdicts"), 600.0, 100.0));
    let fs = &c.first_screen;
    assert_eq!(fs.verdicts_bottom, Some(v.bottom));
    assert!(fs.summary_and_first_plot_fit, "{fs:?}");
}

#[test]
fn browser_missing_is_its_own_outcome() {
    let dir = PrivateDir::new("iomux-browser-test", "a page").unwrap();
    let page = dir.path().join("page.html");
    std::fs::write(&page, "<!doctype html><p>x</p>").unwrap();
    match check_with(Path::new("/nonexistent/chromium"), &page, &dir.path().join("x.png")) {
        Err(BrowserError::Missing(why)) => {
            assert!(why.contains("/nonexistent/chromium") && why.contains("scripts/install-chromium"), "{why}")
        }
        other => panic!("expected Missing, got {other:?}"),
    }
}

#[test]
fn browser_probe_goes_first_in_head() {
    let out = inject("<!doctype html><html><header></header><head lang=x><title>t</title></head></html>", "file:///r/");
    assert_eq!(out.lines().count(), 1, "the probe must not move the page's lines: {out}");
    let probe = out.find("<script>").unwrap();
    assert!(out.find("<head lang=x>").unwrap() < probe && probe < out.find("<title>").unwrap(), "{out}");
    assert!(out.contains("<base href=\"file:///r/\">"));
    assert!(inject("<p>no head</p>", "b").starts_with("<meta charset"));
    assert_eq!(file_url(Path::new("/a b/ü.html")), "file:///a%20b/%C3%BC.html");
    let log = "[1:1:1122/084550.819006:INFO:CONSOLE:4] \"Uncaught Error: boom\", source: file:///x.html (4)\n\
               [1:1:1122/084550.2:ERROR:dbus/bus.cc:405] Failed to connect to the bus";
    assert_eq!(console_messages(log), ["Uncaught Error: boom"]);
    assert_eq!(probe_json("<pre id=\"iomux-probe\" hidden=\"\">{\"a\":1}</pre>"), Some("{\"a\":1}"));
}
