//! `iomux bench resp` (E7) as a user runs it: with redis-server and
//! redis-benchmark installed, a tiny run measures every cell, open and in
//! the CPU quota, without an error reply, and writes its files.

mod lab_support;

use lab_support::{bench, can_make_a_quota, installed};

#[test]
fn a_tiny_run_measures_iomux_and_redis_in_both_scenarios() {
    if !["redis-server", "redis-benchmark"].iter().all(|t| installed(t)) {
        // CI installs them first (.ci/run): there, missing is a failure.
        assert!(std::env::var("CI").is_err(), "CI=true but redis-server or redis-benchmark is missing");
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped: redis-server and redis-benchmark are not installed");
        return;
    }
    let quota = can_make_a_quota();
    let scenarios = if quota { "open,bound" } else { "open" };
    let out = std::env::temp_dir().join(format!("iomux-e7-{}-tiny", std::process::id()));
    let args = ["resp", "--backends", "epoll,uring", "--tests", "get,incr", "--scenarios", scenarios];
    let json = bench(&[&args[..], &["--requests", "2000", "--reps", "1", "--budget", "0"]].concat(), &out, "resp");
    assert!(json["unmeasurable"].as_array().unwrap().is_empty(), "{}", json["unmeasurable"]);
    let takes = json["takes"].as_array().unwrap();
    // A take on a busy machine is measured again: count the cells.
    let mut arms: Vec<String> = takes.iter().map(|t| t["arm"].to_string()).collect();
    arms.sort();
    arms.dedup();
    // (servers and the floor) x tests x depths x scenarios
    let cells = 4 * 2 * 2 * if quota { 2 } else { 1 };
    assert_eq!(arms.len(), cells, "every cell: {arms:?}");
    for t in takes {
        let v = &t["value"];
        assert_eq!(v["errors"], 0, "{t}");
        assert!(v["report"]["requests_per_sec"].as_f64().unwrap() > 1000.0, "{t}");
        let iomux = t["arm"]["server"].as_str().unwrap().starts_with("iomux-");
        assert_eq!(v["syscalls_per_request"].is_f64(), iomux, "iomux counts its syscalls, redis has none: {t}");
        assert_eq!(v["throttled_periods"].is_u64(), t["arm"]["scenario"] == "bound", "{t}");
    }
    let claims = json["claims"].as_array().unwrap();
    // Bound GET at -P 1 and 16 (SET not run), at each the floor over
    // redis, at -P 1 iomux-epoll over the floor, and the error replies.
    assert_eq!(claims.len(), if quota { 6 } else { 1 }, "{claims:?}");
    let md = std::fs::read_to_string(out.join("resp.md")).unwrap();
    assert!(md.contains("GET -P 16, open") && md.contains("| redis "), "{md}");
    assert!(md.contains("| floor "), "the floor's rows: {md}");
    assert!(std::fs::read_to_string(out.join("resp.svg")).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&out).ok();
}
