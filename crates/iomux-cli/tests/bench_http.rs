//! `iomux bench http` (E6) as a user runs it: with wrk, h2load and nginx
//! installed, a tiny run measures every cell without errors; without a
//! tool, it says which is missing and how to install it, and still
//! writes its files.

use std::path::PathBuf;
use std::process::Command;

fn iomux() -> Command {
    let mut iomux = Command::new(env!("CARGO_BIN_EXE_iomux"));
    // Tests never install packages: CI's script does, before them.
    iomux.env("IOMUX_NO_INSTALL", "1");
    iomux
}

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("iomux-e6-{}-{name}", std::process::id()))
}

fn installed(tool: &str) -> bool {
    ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"].iter().any(|d| PathBuf::from(d).join(tool).exists())
}

#[test]
fn a_tiny_run_measures_iomux_and_nginx_with_both_clients() {
    if !["wrk", "h2load", "nginx"].iter().all(|t| installed(t)) {
        // Stated where libtest does not capture it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: wrk, h2load and nginx are not all installed (scripts/install-http-tools)"
        );
        return;
    }
    let out = out_dir("tiny");
    let run = iomux()
        .args(["bench", "http", "--backends", "epoll", "--reps", "1", "--seconds", "1", "--out"])
        .arg(&out)
        .output()
        .expect("run iomux");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("http.json")).unwrap()).unwrap();
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2 * 2 * 2, "2 servers x 2 clients x 2 depths: {cells:?}");
    for c in cells {
        assert_eq!(c["errors"], 0, "{c}");
        assert!(c["requests_per_sec"]["median"].as_f64().unwrap() > 1000.0, "{c}");
        assert!(c["runs"][0]["report"]["requests"].as_u64().unwrap() > 0, "{c}");
    }
    let epoll =
        cells.iter().find(|c| c["server"] == "iomux-epoll" && c["depth"] == 16 && c["client"] == "wrk").unwrap();
    let syscalls = epoll["runs"][0]["syscalls_per_request"].as_f64().unwrap();
    assert!(syscalls > 0.0 && syscalls < 1.0, "pipelined responses go out in batches: {syscalls} syscalls/request");
    let checks = json["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 5, "{checks:?}");
    let errors = checks.iter().find(|c| c["claim"] == "E6 errors reported by wrk and h2load").unwrap();
    assert_eq!(errors["value"], 0.0, "{errors}");
    let md = std::fs::read_to_string(out.join("http.md")).unwrap();
    assert!(md.contains("**wrk depth 16**") && md.contains("| nginx "), "{md}");
    assert!(std::fs::read_to_string(out.join("http.svg")).unwrap().starts_with("<svg"));
    assert!(std::fs::read_to_string(out.join("report.html")).unwrap().contains("E6"));
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn without_the_tools_it_says_what_is_missing_and_how_to_install_it() {
    let out = out_dir("missing");
    let run = iomux()
        .args(["bench", "http", "--backends", "epoll", "--reps", "1", "--out"])
        .arg(&out)
        .env("IOMUX_WRK", "/nonexistent/wrk")
        .env("IOMUX_H2LOAD", "/nonexistent/h2load")
        .env("IOMUX_NGINX", "/nonexistent/nginx")
        .output()
        .expect("run iomux");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "a missing tool is no failure of the bench: {stderr}");
    for tool in ["/nonexistent/wrk", "/nonexistent/h2load", "/nonexistent/nginx", "scripts/install-http-tools"] {
        assert!(stderr.contains(tool), "{tool} not named: {stderr}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("http.json")).unwrap()).unwrap();
    assert!(json["skipped"].as_str().unwrap().contains("install"), "{json}");
    assert!(json["checks"].as_array().unwrap().iter().all(|c| c["verdict"] == "not measurable"), "{json}");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn bad_flags_are_refused_before_anything_runs() {
    for (args, says) in [
        (&["--depths", "0"][..], "--depths"),
        (&["--depths", "1,1"][..], "twice"),
        (&["--backends", "kqueue"][..], "kqueue"),
        (&["--seconds", "0"][..], "--seconds"),
        (&["--reps", "0"][..], "--reps"),
    ] {
        let run = iomux().args(["bench", "http"]).args(args).args(["--out", "/nonexistent/never"]).output().unwrap();
        assert!(!run.status.success(), "{args:?} accepted");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
