//! `report.html` checked in a real browser: headless Chromium renders the
//! page at 1400x900 with the network closed, and reports page errors,
//! empty plots, where the verdict summary and the first plot sit, and a
//! screenshot of the first screen.
//!
//! Chromium runs twice, each with its own command line and no driver:
//! `--dump-dom` on a copy of the page with a probe script injected first
//! (it records errors and measures the layout into a `<pre>` that the dump
//! prints), then `--screenshot` on the original page. That needs only the
//! `chromium` package and std, where WebDriver would need chromedriver of
//! the same version, a port and an HTTP client: more to go wrong.

use crate::os::PrivateDir;
use serde::Deserialize;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The window the report is judged in, in CSS pixels (width, height).
pub const VIEWPORT: (u32, u32) = (1400, 900);

/// Where Debian's package puts the browser; `$CHROMIUM` overrides it.
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// A hung browser must not hang the caller.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Headless, as root, with every network name unresolvable (the report
/// must be self-contained: a fetch fails and shows up as an error) and the
/// browser's own background traffic off, else it floods a closed network
/// with connection attempts.
const FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
];

/// The probe injected at the top of `<head>`. Errors: uncaught exceptions
/// and failed loads (`error` in the capture phase, as element errors do
/// not bubble), unhandled rejections, `console.error`, and every network
/// request (resource timing lists http(s) fetches, failed ones too). On
/// `load` it measures the layout in document coordinates: the measuring
/// run's window has a shorter viewport than the screenshot's (headless
/// keeps room for browser chrome), and positions in the document depend
/// only on the width, which is the same. The JSON escapes `&`, `<`, `>`
/// and no-break spaces, so the DOM dump prints it verbatim. It is
/// injected as one line (every statement ends in `;`, no `//` comments),
/// so the page's own line numbers stay right.
const PROBE: &str = r#"(function () {
  var P = { errors: [], loaded: false };
  function write() {
    if (!P.loaded || !document.body) return;
    var pre = document.getElementById('iomux-probe');
    if (!pre) { pre = document.createElement('pre'); pre.id = 'iomux-probe'; pre.hidden = true; document.body.appendChild(pre); }
    pre.textContent = JSON.stringify(P).replace(/&/g, '\\u0026').replace(/</g, '\\u003c').replace(/>/g, '\\u003e').replace(/\u00a0/g, '\\u00a0');
  }
  function add(kind, message) { P.errors.push({ kind: kind, message: String(message) }); write(); }
  addEventListener('error', function (e) {
    var t = e.target;
    if (t && t !== window && t.nodeType === 1) {
      var url = t.src || t.href || t.getAttribute('src') || t.getAttribute('href') || '';
      if (typeof url === 'object' && url !== null) url = url.baseVal;
      add('resource', '<' + t.tagName.toLowerCase() + '> failed to load ' + url);
    } else {
      add('uncaught', (e.message || 'error') + (e.filename ? ' (' + e.filename + ':' + e.lineno + ')' : ''));
    }
  }, true);
  addEventListener('unhandledrejection', function (e) {
    add('rejection', e.reason && e.reason.stack ? e.reason.stack : e.reason);
  });
  var consoleError = console.error;
  console.error = function () {
    add('console', Array.prototype.map.call(arguments, String).join(' '));
    return consoleError.apply(console, arguments);
  };
  try {
    new PerformanceObserver(function (list) {
      list.getEntries().forEach(function (r) {
        if (!/^(data|blob|about):/.test(r.name)) add('network', 'requested ' + r.name);
      });
    }).observe({ type: 'resource', buffered: true });
  } catch (e) { add('probe', 'no resource timing: ' + e); }
  function box(el) {
    var r = el.getBoundingClientRect();
    return { top: r.top + scrollY, bottom: r.bottom + scrollY, width: r.width, height: r.height };
  }
  addEventListener('load', function () {
    var figures = document.querySelectorAll('figure');
    P.plots = Array.prototype.map.call(figures, function (f) {
      var svg = f.querySelector('svg'), section = f.closest('section');
      var b = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
      return {
        section: section && section.id ? section.id : null, has_svg: !!svg,
        width: b.width, height: b.height,
        drawn: svg ? svg.querySelectorAll('path,line,polyline,polygon,rect,circle,ellipse,text,image,use').length : 0
      };
    });
    P.first_figure_bottom = figures.length ? box(figures[0]).bottom : null;
    var v = document.getElementById('verdicts');
    P.verdicts = v ? {
      tag: v.tagName.toLowerCase(),
      first_section: document.body.querySelector('section') === v,
      top: box(v).top, bottom: box(v).bottom
    } : null;
    P.viewport = [innerWidth, innerHeight];
    P.loaded = true;
    write();
  });
})();"#;

/// Why the check did not run: no browser, or a run that failed.
#[derive(Debug)]
pub enum BrowserError {
    /// No usable Chromium on this machine; the text says where it looked
    /// and how to install one. Not a verdict on the page.
    Missing(String),
    /// Chromium was there but the check could not be made: a run that
    /// failed or hung, unreadable files, a probe that wrote nothing.
    Failed(String),
}

impl fmt::Display for BrowserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BrowserError::Missing(why) => write!(f, "no browser: {why}"),
            BrowserError::Failed(why) => write!(f, "browser check failed: {why}"),
        }
    }
}

impl std::error::Error for BrowserError {}

/// An error the page raised while loading or rendering.
#[derive(Clone, Debug, Deserialize)]
pub struct PageError {
    /// `uncaught`, `rejection`, `console` (console.error, or any console
    /// message of the screenshot run: Chromium logs every level alike and
    /// the report has no scripts), `resource` (a load that failed),
    /// `network` (a request off the machine), `probe`.
    pub kind: String,
    /// What the page or Chromium said.
    pub message: String,
}

/// One `<figure>`'s plot as rendered, in CSS pixels.
#[derive(Clone, Debug, Deserialize)]
pub struct Plot {
    /// The id of the `<section>` holding the figure, if any.
    pub section: Option<String>,
    /// Whether the figure holds an `<svg>` at all.
    pub has_svg: bool,
    /// Rendered width of the svg.
    pub width: f64,
    /// Rendered height of the svg.
    pub height: f64,
    /// Shapes and text inside the svg.
    pub drawn: u32,
}

impl Plot {
    /// An svg with an area and something drawn in it.
    pub fn is_drawn(&self) -> bool {
        self.has_svg && self.width > 0.0 && self.height > 0.0 && self.drawn > 0
    }
}

/// The `id="verdicts"` element as rendered.
#[derive(Clone, Debug, Deserialize)]
pub struct Verdicts {
    /// Its tag name, lower case (a `section` is expected).
    pub tag: String,
    /// Whether it is the first `<section>` in the body, in document order.
    pub first_section: bool,
    /// Top, in CSS pixels from the top of the page.
    pub top: f64,
    /// Bottom, in CSS pixels from the top of the page.
    pub bottom: f64,
}

/// What the 1400x900 window shows before any scrolling.
#[derive(Clone, Debug)]
pub struct FirstScreen {
    /// The viewport height the positions are compared with.
    pub height: f64,
    /// Bottom of the verdicts element, if there is one.
    pub verdicts_bottom: Option<f64>,
    /// Bottom of the first `<figure>` in document order, if there is one.
    pub first_figure_bottom: Option<f64>,
    /// Both exist and both bottoms are within the viewport height.
    pub summary_and_first_plot_fit: bool,
}

/// What the browser saw of a report.
#[derive(Clone, Debug)]
pub struct BrowserCheck {
    /// Page errors; a sound report has none.
    pub errors: Vec<PageError>,
    /// Every `<figure>`, in document order.
    pub plots: Vec<Plot>,
    /// The verdict summary, if the page has an `id="verdicts"` element.
    pub verdicts: Option<Verdicts>,
    /// Whether the summary and the first plot fit the first screen; the
    /// caller decides whether that matters.
    pub first_screen: FirstScreen,
    /// The measuring run's innerWidth x innerHeight (its width must be the
    /// viewport's; its height is shorter, see `PROBE`).
    pub measured_viewport: (f64, f64),
    /// The 1400x900 screenshot of the original page.
    pub screenshot: PathBuf,
}

impl BrowserCheck {
    /// What is wrong with the page, one line each; empty when it is sound.
    /// The first-screen fit is not among them.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.errors.iter().map(|e| format!("{}: {}", e.kind, e.message)).collect();
        if self.plots.is_empty() {
            out.push("the page has no <figure>".into());
        }
        for (i, p) in self.plots.iter().enumerate() {
            if !p.is_drawn() {
                let place = p.section.as_deref().map(|s| format!(" in section {s}")).unwrap_or_default();
                out.push(if p.has_svg {
                    format!(
                        "figure {}{place}: empty plot ({}x{} px, {} drawn elements)",
                        i + 1,
                        p.width,
                        p.height,
                        p.drawn
                    )
                } else {
                    format!("figure {}{place}: no <svg>", i + 1)
                });
            }
        }
        match &self.verdicts {
            None => out.push("no id=\"verdicts\" element".into()),
            Some(v) => {
                if v.tag != "section" || !v.first_section {
                    out.push(format!("id=\"verdicts\" is a <{}>, and not the first <section>", v.tag));
                }
                if v.top >= self.first_screen.height {
                    out.push(format!("the verdicts start at {} px, below the first screen", v.top));
                }
            }
        }
        out
    }
}

/// The probe's JSON.
#[derive(Deserialize)]
struct Probe {
    errors: Vec<PageError>,
    plots: Vec<Plot>,
    first_figure_bottom: Option<f64>,
    verdicts: Option<Verdicts>,
    viewport: (f64, f64),
}

/// After `report.html` is written: `report.png` beside it (the first
/// screen) and the browser's findings, as lines for the terminal. Never
/// fails the caller: without Chromium it says what is missing and how to
/// install it.
pub fn screenshot_and_check(report_html: &Path) -> Vec<String> {
    let png = report_html.with_file_name("report.png");
    match check(report_html, &png) {
        Err(e @ BrowserError::Missing(_)) => vec![format!("no screenshot of the report: {e}")],
        Err(e) => vec![format!("warning: the report could not be checked in Chromium: {e}")],
        Ok(c) => {
            let mut lines = vec![format!(
                "wrote {} (the report's first screen in Chromium, laid out {} px wide)",
                c.screenshot.display(),
                c.measured_viewport.0
            )];
            lines.extend(c.problems().into_iter().map(|p| format!("warning: report.html in Chromium: {p}")));
            if !c.first_screen.summary_and_first_plot_fit {
                let px = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} px"));
                lines.push(format!(
                    "note: at {}x{} the verdicts (ending at {}) and the first plot (ending at {}) do not both fit \
                     on the first screen",
                    VIEWPORT.0,
                    VIEWPORT.1,
                    px(c.first_screen.verdicts_bottom),
                    px(c.first_screen.first_figure_bottom)
                ));
            }
            lines
        }
    }
}

/// Renders `report_html` in headless Chromium (`$CHROMIUM`, else
/// /usr/bin/chromium) at 1400x900 with no network, measures it, and saves
/// a screenshot of the first screen to `screenshot_png`. About two seconds.
pub fn check(report_html: &Path, screenshot_png: &Path) -> Result<BrowserCheck, BrowserError> {
    check_with(&chromium_path(), report_html, screenshot_png)
}

/// `$CHROMIUM`, else where Debian's package puts it.
pub fn chromium_path() -> PathBuf {
    std::env::var_os("CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_CHROMIUM))
}

fn check_with(chromium: &Path, report_html: &Path, screenshot_png: &Path) -> Result<BrowserCheck, BrowserError> {
    let missing = |why: String| {
        BrowserError::Missing(format!(
            "chromium not found at {} ({why}; $CHROMIUM overrides the path); install it with scripts/install-chromium",
            chromium.display()
        ))
    };
    match std::fs::metadata(chromium) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(missing("not a file".into())),
        Err(e) => return Err(missing(e.to_string())),
    }
    let failed =
        |what: &str, path: &Path, e: std::io::Error| BrowserError::Failed(format!("{what} {}: {e}", path.display()));
    let report = std::fs::canonicalize(report_html).map_err(|e| failed("cannot find", report_html, e))?;
    let html = std::fs::read_to_string(&report).map_err(|e| failed("cannot read", &report, e))?;
    let screenshot =
        std::path::absolute(screenshot_png).map_err(|e| failed("no absolute path for", screenshot_png, e))?;
    let work = PrivateDir::new("iomux-browser", "Chromium's profiles and the probed page")
        .map_err(|e| BrowserError::Failed(e.to_string()))?;

    // The copy lives in the private folder; <base> resolves its links
    // against the original's folder as the original would.
    let dir_url = report.parent().map(|d| file_url(d) + "/").unwrap_or_default();
    let probed = work.path().join("probed.html");
    std::fs::write(&probed, inject(&html, &dir_url)).map_err(|e| failed("cannot write", &probed, e))?;
    let window = format!("--window-size={},{}", VIEWPORT.0, VIEWPORT.1);
    // Virtual time runs idle time at once: late errors are caught for
    // nothing, and the dump waits for the budget rather than only for load.
    let dump = run(
        chromium,
        work.path(),
        "dump",
        &[&window, "--virtual-time-budget=2000", "--dump-dom", &file_url(&probed)],
        missing,
    )?;
    let probe = probe_json(&dump.stdout).ok_or_else(|| {
        BrowserError::Failed(format!(
            "{} --dump-dom {} printed no probe result: the page did not finish loading; stderr ends: {}",
            chromium.display(),
            probed.display(),
            tail(&dump.stderr)
        ))
    })?;
    let probe: Probe = serde_json::from_str(probe).map_err(|e| {
        BrowserError::Failed(format!("the probe's result from {} does not parse: {e}: {probe}", report.display()))
    })?;
    if probe.viewport.0 != f64::from(VIEWPORT.0) {
        return Err(BrowserError::Failed(format!(
            "the measuring run's viewport was {} px wide, not {}: its layout is not the screenshot's",
            probe.viewport.0, VIEWPORT.0
        )));
    }

    match std::fs::remove_file(&screenshot) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(failed("cannot replace", &screenshot, e)),
        _ => {}
    }
    let shot_arg = format!("--screenshot={}", screenshot.display());
    let shot = run(chromium, work.path(), "screenshot", &[&window, &shot_arg, &file_url(&report)], missing)?;
    let mut magic = [0u8; 8];
    let wrote = std::fs::File::open(&screenshot).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic));
    if wrote.is_err() || magic != *b"\x89PNG\r\n\x1a\n" {
        return Err(BrowserError::Failed(format!(
            "{} --screenshot wrote no PNG to {}; stderr ends: {}",
            chromium.display(),
            screenshot.display(),
            tail(&shot.stderr)
        )));
    }

    // Errors name the page they came from: the original, not its copy.
    let (probed_url, report_url) = (file_url(&probed), file_url(&report));
    let mut errors: Vec<PageError> = probe
        .errors
        .into_iter()
        .map(|e| PageError { message: e.message.replace(&probed_url, &report_url), ..e })
        .collect();
    // The original page ran without the probe: its console messages come
    // only from Chromium's log. Ones the probe reported already (an
    // uncaught error, with its place appended) are skipped.
    for message in console_messages(&shot.stderr) {
        let place = format!("{message} (");
        if !errors.iter().any(|e| e.message == message || e.message.starts_with(&place)) {
            errors.push(PageError { kind: "console".into(), message });
        }
    }
    let height = f64::from(VIEWPORT.1);
    let verdicts_bottom = probe.verdicts.as_ref().map(|v| v.bottom);
    let fits = |b: Option<f64>| b.is_some_and(|b| b <= height);
    Ok(BrowserCheck {
        errors,
        plots: probe.plots,
        verdicts: probe.verdicts,
        first_screen: FirstScreen {
            height,
            verdicts_bottom,
            first_figure_bottom: probe.first_figure_bottom,
            summary_and_first_plot_fit: fits(verdicts_bottom) && fits(probe.first_figure_bottom),
        },
        measured_viewport: probe.viewport,
        screenshot,
    })
}

/// A finished Chromium run's output.
struct Output {
    stdout: String,
    stderr: String,
}

/// Runs Chromium with `FLAGS`, a fresh profile in `work` and `args`, its
/// output in files (a dumped report overflows a pipe nobody reads yet),
/// killed with its whole process group after `RUN_TIMEOUT`.
fn run(
    chromium: &Path,
    work: &Path,
    name: &str,
    args: &[&str],
    missing: impl Fn(String) -> BrowserError,
) -> Result<Output, BrowserError> {
    use std::os::unix::process::CommandExt;
    let profile = work.join(format!("profile-{name}"));
    let (out_path, err_path) = (work.join(format!("{name}.stdout")), work.join(format!("{name}.stderr")));
    let described = format!("{} {}", chromium.display(), args.join(" "));
    let io_failed = |what: &str, e: std::io::Error| BrowserError::Failed(format!("{what} for `{described}`: {e}"));
    let stdout = std::fs::File::create(&out_path).map_err(|e| io_failed("cannot create stdout file", e))?;
    let stderr = std::fs::File::create(&err_path).map_err(|e| io_failed("cannot create stderr file", e))?;
    let mut argv: Vec<OsString> = FLAGS.iter().map(OsString::from).collect();
    argv.push(format!("--user-data-dir={}", profile.display()).into());
    argv.push("--enable-logging=stderr".into());
    argv.push("--v=0".into());
    argv.extend(args.iter().map(OsString::from));
    let mut child = Command::new(chromium)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        // Its own group: a timeout kills the renderers and helpers too.
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => missing(e.to_string()),
            _ => io_failed("cannot start chromium", e),
        })?;
    let status = match crate::os::wait_within(&mut child, RUN_TIMEOUT) {
        Ok(Some(status)) => status,
        // Not waited for (or waited too long): the whole group goes.
        waited => {
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill has no memory effects; -pid is the group
                // this child leads, still unreaped so still ours.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
            let _ = child.wait();
            if let Err(e) = waited {
                return Err(io_failed("cannot wait", e));
            }
            let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
            return Err(BrowserError::Failed(format!(
                "`{described}` ran {} s and was killed; stderr ends: {}",
                RUN_TIMEOUT.as_secs(),
                tail(&stderr)
            )));
        }
    };
    let stdout = std::fs::read_to_string(&out_path).map_err(|e| io_failed("cannot read stdout", e))?;
    let stderr = std::fs::read_to_string(&err_path).map_err(|e| io_failed("cannot read stderr", e))?;
    if !status.success() {
        return Err(BrowserError::Failed(format!(
            "`{described}` exited with {status}; stderr ends: {}",
            tail(&stderr)
        )));
    }
    Ok(Output { stdout, stderr })
}

/// `html` with a charset (the probe pushes the page's own past the first
/// 1024 bytes, where Chromium looks), `<base href=base>` and the probe at
/// the very top of `<head>`, else of the document.
fn inject(html: &str, base: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let after_tag = |name: &str| -> Option<usize> {
        let mut from = 0;
        while let Some(i) = lower[from..].find(name).map(|i| i + from) {
            let next = lower[i + name.len()..].chars().next();
            if matches!(next, Some(c) if c == '>' || c.is_ascii_whitespace()) {
                return lower[i..].find('>').map(|j| i + j + 1);
            }
            from = i + name.len();
        }
        None
    };
    let at = after_tag("<head").or_else(|| after_tag("<html")).or_else(|| after_tag("<!doctype")).unwrap_or(0);
    let base = base.replace('"', "%22");
    let probe: String = PROBE.lines().map(str::trim).collect();
    format!("{}<meta charset=\"utf-8\"><base href=\"{base}\"><script>{probe}</script>{}", &html[..at], &html[at..])
}

/// A `file://` URL for an absolute path, every byte outside the unreserved
/// set and `/` percent-encoded.
fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            url.push(char::from(b));
        } else {
            url += &format!("%{b:02X}");
        }
    }
    url
}

/// The probe's JSON in a DOM dump.
fn probe_json(dump: &str) -> Option<&str> {
    let at = dump.find("id=\"iomux-probe\"")?;
    let start = at + dump[at..].find('>')? + 1;
    let end = start + dump[start..].find("</pre>")?;
    Some(&dump[start..end])
}

/// The page's console messages in Chromium's log (`INFO:CONSOLE:12] "text",
/// source: URL (12)`; older versions write `CONSOLE(12)`). The rest of the
/// log (D-Bus, GPU, sandbox) is the browser's, not the page's.
fn console_messages(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| {
            let at = l.find(":CONSOLE")?;
            let rest = &l[at + ":CONSOLE".len()..];
            let rest = &rest[rest.find("] ")? + 2..];
            let text = rest.rsplit_once(", source: ").map_or(rest, |(text, _)| text);
            Some(text.trim_matches('"').to_string())
        })
        .collect()
}

/// The last lines of a Chromium log that are not D-Bus noise.
fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.contains("dbus") && !l.trim().is_empty()).collect();
    let text = lines[lines.len().saturating_sub(6)..].join(" | ");
    if text.is_empty() {
        "(nothing)".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests;
