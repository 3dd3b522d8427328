//! `iomux bench http` (E6) as a user runs it: with wrk, h2load and nginx
//! installed, a tiny run measures every cell without errors; without a
//! tool, it says which is missing and how to install it, and still
//! writes its files.

mod lab_support;

use lab_support::{bench, can_make_a_quota, installed, iomux, refuses};
use std::path::PathBuf;

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("iomux-e6-{}-{name}", std::process::id()))
}

#[test]
fn a_tiny_run_measures_iomux_and_nginx_with_both_clients() {
    if !["wrk", "h2load", "nginx"].iter().all(|t| installed(t)) {
        // CI installs them first (.ci/run): there, missing is a failure.
        assert!(std::env::var("CI").is_err(), "CI=true but wrk, h2load or nginx is missing");
        // Stated where libtest does not capture it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: wrk, h2load and nginx are not all installed (scripts/install-http-tools)"
        );
        return;
    }
    let out = out_dir("tiny");
    let args = ["http", "--backends", "epoll", "--reps", "1", "--seconds", "1", "--budget", "0", "--tls-idle", "200"];
    let json = bench(&args, &out, "http");
    assert!(json["unmeasurable"].as_array().unwrap().is_empty(), "{}", json["unmeasurable"]);
    let all_takes = json["takes"].as_array().unwrap();
    let (takes, tls): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) =
        all_takes.iter().partition(|t| t["arm"]["workload"] == "plain");
    for server in ["iomux-epoll", "nginx"] {
        for client in ["wrk", "h2load"] {
            for depth in [1, 16] {
                let runs: Vec<&serde_json::Value> = takes
                    .iter()
                    .filter(|t| {
                        t["arm"]["server"] == server && t["arm"]["client"] == client && t["arm"]["depth"] == depth
                    })
                    .map(|t| &t["value"])
                    .collect();
                assert!(!runs.is_empty(), "{server} {client} depth {depth}: no run");
                for r in runs {
                    assert_eq!(r["report"]["errors"], 0, "{r}");
                    assert!(r["report"]["requests_per_sec"].as_f64().unwrap() > 1000.0, "{r}");
                }
            }
        }
    }
    // The C floor runs by wrk at depth 1 alone, and answers every request.
    let floor: Vec<&&serde_json::Value> = takes.iter().filter(|t| t["arm"]["server"] == "floor").collect();
    assert!(!floor.is_empty(), "the C floor did not run");
    for t in floor {
        assert!(t["arm"]["client"] == "wrk" && t["arm"]["depth"] == 1, "{t}");
        assert_eq!(t["value"]["report"]["errors"], 0, "{t}");
        assert!(t["value"]["report"]["requests_per_sec"].as_f64().unwrap() > 1000.0, "{t}");
    }
    let pipelined = takes
        .iter()
        .find(|t| t["arm"]["server"] == "iomux-epoll" && t["arm"]["depth"] == 16 && t["arm"]["client"] == "wrk")
        .unwrap();
    let syscalls = pipelined["value"]["syscalls_per_request"].as_f64().unwrap();
    assert!(syscalls > 0.0 && syscalls < 1.0, "pipelined responses go out in batches: {syscalls} syscalls/request");
    // Server-bound (as root, with a cgroup CPU controller): wrk alone.
    let bound: Vec<_> = takes.iter().filter(|t| t["arm"]["scenario"] == "bound").copied().collect();
    if can_make_a_quota() {
        // A take on a busy machine is measured again: count the cells.
        let mut cells: Vec<String> = bound.iter().map(|t| t["arm"].to_string()).collect();
        cells.sort();
        cells.dedup();
        // The bound scenario judges depth 1 alone.
        assert_eq!(cells.len(), 3, "iomux, nginx and the C floor by wrk at depth 1: {cells:?}");
        assert!(bound.iter().all(|t| t["arm"]["depth"] == 1), "{bound:?}");
        assert!(bound.iter().all(|t| t["arm"]["client"] == "wrk" && t["value"]["throttled_periods"].is_u64()));
    }
    // Over TLS: the servers counted their handshakes, and the idle cells
    // their memory; in the quota, the three handshake kinds and keep-alive.
    for server in ["iomux-epoll", "nginx"] {
        let of = |workload: &str| -> Vec<&serde_json::Value> {
            let mine = |t: &&&serde_json::Value| t["arm"]["server"] == server && t["arm"]["workload"] == workload;
            tls.iter().filter(mine).copied().collect()
        };
        let idle: Vec<f64> =
            of("https-idle").iter().map(|t| t["value"]["idle_rss_bytes_per_conn"].as_f64().unwrap()).collect();
        assert!(!idle.is_empty() && idle.iter().all(|&b| b > 0.0), "{server}: {idle:?}");
        for t in of("https-full") {
            let full = t["value"]["handshakes"]["full"].as_u64().unwrap();
            assert!(full > 100 && t["value"]["handshakes"]["resumed"] == 0, "{server}: {t}");
        }
        for t in of("https-resumed") {
            assert!(t["value"]["handshakes"]["resumed"].as_u64().unwrap() > 0, "{server}: {t}");
        }
        if can_make_a_quota() {
            for workload in ["https", "https-full", "https-resumed"] {
                assert!(!of(workload).is_empty(), "{server} {workload}: no run");
            }
        }
    }
    let claims = json["claims"].as_array().unwrap();
    // Open: depth 1 and 16, errors, CPU per request against iomux and the
    // floor; bound: against nginx, the floor against nginx, iomux-epoll
    // against the floor.
    let plain_claims = if bound.is_empty() { 5 } else { 8 };
    let tls_claims = if bound.is_empty() { 1 } else { 3 };
    assert_eq!(claims.len(), plain_claims + tls_claims, "{claims:?}");
    let errors = claims.iter().find(|c| c["quantity"] == "E6 errors reported by wrk").unwrap();
    assert_eq!(errors["estimate"]["median"], 0.0, "{errors}");
    let md = std::fs::read_to_string(out.join("http.md")).unwrap();
    assert!(md.contains("wrk depth 16") && md.contains("| nginx "), "{md}");
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
    // Only what needs none of them ran: iomux's idle TLS connections,
    // held by iomux load.
    let takes = json["takes"].as_array().unwrap();
    let measured = |t: &&serde_json::Value| t["arm"]["server"] == "iomux-epoll" && t["arm"]["workload"] == "https-idle";
    assert!(takes.iter().all(|t| measured(&t)), "nothing but iomux's idle cell measured: {json}");
    for c in json["claims"].as_array().unwrap() {
        assert_eq!(c["verdict"], "not measurable", "{c}");
        assert!(c["why"].as_str().unwrap().contains("install"), "{c}");
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn bad_flags_are_refused_before_anything_runs() {
    refuses(
        "http",
        &[
            (&["--depths", "0"], "--depths"),
            (&["--depths", "1,1"], "twice"),
            (&["--backends", "kqueue"], "kqueue"),
            (&["--seconds", "0"], "--seconds"),
            (&["--reps", "0"], "--reps"),
        ],
    );
}
