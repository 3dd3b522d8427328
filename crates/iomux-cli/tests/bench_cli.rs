//! `iomux bench` as a user runs it: files written, rows shaped as
//! documented, bad input refused with a message.

use std::process::Command;

fn iomux() -> Command {
    let mut iomux = Command::new(env!("CARGO_BIN_EXE_iomux"));
    // Tests never install packages: CI's script does, before them.
    iomux.env("IOMUX_NO_INSTALL", "1");
    iomux
}

#[test]
fn syscall_rate_writes_json_markdown_and_svg() {
    let out = std::env::temp_dir().join(format!("iomux-e1-{}", std::process::id()));
    let run = iomux()
        .args(["bench", "syscall-rate", "--quick", "--fds", "1,64,30000000", "--budget", "0", "--out"])
        .arg(&out)
        .output()
        .expect("run iomux");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("book epoll_wait()") && stdout.contains("714,848"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("syscall-rate.json")).unwrap()).unwrap();
    assert_eq!(json["experiment"], "syscall-rate");
    assert_eq!(json["schema"], 2);
    assert!(json["machine"]["kernel"].is_string());
    let takes = json["takes"].as_array().unwrap();
    let of = |subject: &str, fds: u64| -> Vec<&serde_json::Value> {
        takes.iter().filter(|t| t["arm"]["subject"] == subject && t["arm"]["fds"] == fds).map(|t| &t["value"]).collect()
    };
    for subject in ["select", "poll", "epoll", "uring", "raw-poll", "raw-epoll", "null-syscall", "mio", "polling"] {
        for fds in [1, 64] {
            let samples = of(subject, fds);
            // --quick --budget 0: the first round alone (one take, more
            // when the machine was busy and it was taken again).
            assert!(!samples.is_empty(), "{subject} at {fds}: no sample of the first round");
            for v in samples {
                assert!(v["calls_per_sec"].as_f64().unwrap() > 0.0, "{v}");
            }
        }
    }
    let book = json["params"]["book"].as_array().unwrap();
    assert!(book.iter().any(|r| r["fds"] == 1000 && r["poll_calls_per_sec"] == 3343.0), "{book:?}");
    // The library's epoll makes exactly one syscall per empty wait.
    for v in of("epoll", 64) {
        assert_eq!(v["syscalls"], v["calls"], "{v}");
    }
    // Thirty million fds cannot be had: the run says why instead of a number.
    let impossible = json["params"]["not_possible"].as_array().unwrap();
    assert!(
        impossible.iter().any(|p| p[0] == 30_000_000 && p[1].as_str().unwrap().contains("RLIMIT_NOFILE")),
        "{impossible:?}"
    );
    assert!(of("epoll", 30_000_000).is_empty());

    let md = std::fs::read_to_string(out.join("syscall-rate.md")).unwrap();
    assert!(md.contains("| fds") && md.contains("Verdicts: "), "{md}");
    assert!(md.contains("RLIMIT_NOFILE"), "the page says why 30,000,000 was not measured: {md}");
    let svg = std::fs::read_to_string(out.join("syscall-rate.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("book-epoll"));
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let zero = iomux().args(["bench", "syscall-rate", "--fds", "0", "--out", "/nonexistent/never"]).output().unwrap();
    assert!(!zero.status.success());
    assert!(String::from_utf8_lossy(&zero.stderr).contains("at least 1"), "{:?}", zero);

    let word = iomux().args(["bench", "syscall-rate", "--fds", "many"]).output().unwrap();
    assert_eq!(word.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&word.stderr).contains("invalid value 'many'"));

    let unknown = iomux().args(["bench", "no-such-experiment"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unrecognized subcommand 'no-such-experiment'"));
    let help = iomux().args(["bench", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("syscall-rate"), "help lists the experiments");

    let both = iomux().args(["bench", "--quick", "--full"]).output().unwrap();
    assert_eq!(both.status.code(), Some(2));
}

/// E2, E3 and E4 at toy sizes, then the report that joins them.
#[test]
fn client_server_experiments_write_rows_and_a_report() {
    let out = std::env::temp_dir().join(format!("iomux-lab-{}", std::process::id()));
    let run = |args: &[&str]| {
        let r = iomux().arg("bench").args(args).arg("--out").arg(&out).output().expect("run iomux bench");
        assert!(
            r.status.success(),
            "{args:?}: {}\n{}",
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        );
        String::from_utf8_lossy(&r.stdout).into_owned()
    };
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap()).unwrap()
    };

    let idle = run(&["idle", "--idle", "0,20", "--backends", "epoll,poll", "--budget", "5"]);
    assert!(idle.contains("poll's time grows linearly"), "published claim printed: {idle}");
    let doc = read("idle");
    assert_eq!(doc["schema"], 2);
    let takes = doc["takes"].as_array().unwrap().clone();
    // Six rounds at least, unless the tests beside this one kept the
    // machine so busy that the trial stopped measuring again ("swamped").
    let swamped = doc["noise"]["swamped"].as_bool().unwrap();
    for backend in ["epoll", "poll"] {
        for z in [0, 20] {
            let of_arm = takes.iter().filter(|t| t["arm"]["backend"] == backend && t["arm"]["idle"] == z).count();
            assert!(
                of_arm >= 6 || swamped,
                "{backend} Z={z}: {of_arm} takes, fewer than the six rounds a claim needs, on a machine not swamped"
            );
        }
    }
    if swamped {
        assert!(doc["noise"]["excluded"].as_u64().unwrap() * 2 > doc["noise"]["takes"].as_u64().unwrap(), "{doc}");
    }
    for t in &takes {
        let v = &t["value"];
        assert!(v["seconds"].as_f64().unwrap() > 0.0, "{t}");
        assert!(v["syscalls_per_request"].as_f64().unwrap() >= 2.0, "a read and a write per request at least: {t}");
    }
    // Both claims judged from paired rounds: decided only on six quiet
    // rounds or more (a 95% interval); fewer (the tests beside this one
    // keep the machine busy) leave them inconclusive, saying why.
    let claims = doc["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 2);
    for c in claims {
        let n = c["estimate"]["n"].as_u64().unwrap();
        assert!(c["estimate"]["lo"].as_f64() <= c["estimate"]["hi"].as_f64(), "{c}");
        if n < 6 {
            assert_eq!(c["verdict"], "inconclusive", "{c}");
            assert!(c["why"].as_str().unwrap().contains("6 needed") || swamped, "{c}");
        }
    }
    assert!(doc["figures"].as_array().unwrap().iter().any(|f| f["name"] == "epoll, Z = 20: seconds"));

    run(&["sink", "--seconds", "0.3", "--backends", "epoll,uring", "--budget", "0"]);
    let doc = read("sink");
    let takes = doc["takes"].as_array().unwrap();
    for backend in ["epoll", "uring"] {
        for paced in [true, false] {
            let of_arm = takes.iter().filter(|t| t["arm"]["backend"] == backend && t["arm"]["paced"] == paced).count();
            // --budget 0: the first round alone (taken again when busy).
            assert!((1..=3).contains(&of_arm), "{backend} paced={paced}: {of_arm} takes");
        }
    }
    for t in takes {
        let v = &t["value"];
        assert!(v["mb_per_sec"].as_f64().unwrap() > 0.0 && v["cpu_s_per_gb"].as_f64().unwrap() > 0.0, "{t}");
        assert!(v["syscalls"].as_object().is_some_and(|kinds| !kinds.is_empty()), "{t}");
    }
    // The article's claims rest on poll, which this run left out: named,
    // not measured.
    let claims = doc["claims"].as_array().unwrap();
    assert!(claims.iter().any(|c| c["source"] == "documents" && c["verdict"] == "not measurable"), "{claims:?}");

    let echo = run(&["echo", "--conns", "60", "--messages", "5", "--backends", "epoll,uring,select", "--budget", "0"]);
    assert!(echo.contains("211,000,000"), "published figures printed");
    let doc = read("echo");
    let takes = doc["takes"].as_array().unwrap();
    let per_echo = |b: &str| -> Vec<f64> {
        takes
            .iter()
            .filter(|t| t["arm"]["backend"] == b)
            .map(|t| t["value"]["syscalls_per_echo"].as_f64().unwrap())
            .collect()
    };
    for t in takes {
        assert_eq!(t["value"]["echoes"], 300, "{t}");
    }
    for b in ["epoll", "select"] {
        assert!(per_echo(b).iter().all(|&n| n >= 2.0), "a read and a write per echo: {b} {:?}", per_echo(b));
    }
    let most_uring = per_echo("uring").into_iter().fold(0.0, f64::max);
    let least_epoll = per_echo("epoll").into_iter().fold(f64::INFINITY, f64::min);
    assert!(most_uring < least_epoll, "no read or write syscalls on io_uring: {most_uring} vs {least_epoll}");

    let report = iomux().arg("report").arg(&out).output().unwrap();
    assert!(report.status.success());
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for section in ["E2 idle", "E3 sink", "E4 echo", "<svg", "Linux "] {
        assert!(html.contains(section), "report lacks {section}");
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn report_of_an_empty_folder_says_so() {
    let dir = std::env::temp_dir().join(format!("iomux-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let r = iomux().arg("report").arg(&dir).output().unwrap();
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("no experiment results"));
    std::fs::remove_dir_all(&dir).ok();
}

/// E5 at a toy size, iomux's epoll server beside two peers (the C server
/// and tokio, built into this same binary): every figure measured from
/// outside, and bad flags refused before any cell runs.
#[test]
fn peers_measures_servers_from_outside() {
    for (flag, value, says) in [
        ("--servers", "nginx", "unknown server 'nginx'"),
        ("--scenarios", "closed-0", "at least one connection"),
        ("--reps", "0", "--reps must be at least 1"),
        ("--seconds", "0", "--seconds must be more than 0"),
        ("--budget", "never", "must be a number of seconds"),
        ("--servers", "iomux-epoll,iomux-epoll", "names iomux-epoll twice"),
    ] {
        let r = iomux().args(["bench", "peers", flag, value, "--out", "/nonexistent/never"]).output().unwrap();
        assert!(!r.status.success(), "{flag} {value}");
        assert!(String::from_utf8_lossy(&r.stderr).contains(says), "{flag} {value}: {r:?}");
    }

    let out = std::env::temp_dir().join(format!("iomux-e5-{}", std::process::id()));
    let r = iomux()
        .args(["bench", "peers", "--servers", "iomux-epoll,c-epoll,tokio", "--scenarios", "closed-20,open-50"])
        .args(["--reps", "2", "--seconds", "0.3", "--budget", "0", "--out"])
        .arg(&out)
        .output()
        .expect("run iomux bench peers");
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&r.stderr));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("peers.json")).unwrap()).unwrap();
    assert_eq!(doc["schema"], 2);
    assert!(doc["unmeasurable"].as_array().unwrap().is_empty(), "{}", doc["unmeasurable"]);
    let takes = doc["takes"].as_array().unwrap();
    let perf = doc["params"]["perf_seconds"].is_number();
    for server in ["iomux-epoll", "c-epoll", "tokio"] {
        for scenario in ["closed-20", "open-50"] {
            let of = |perf_run: bool| -> Vec<&serde_json::Value> {
                takes
                    .iter()
                    .filter(|t| t["arm"]["server"] == server && t["arm"]["scenario"] == scenario)
                    .filter(|t| t["arm"]["perf"] == perf_run)
                    .map(|t| &t["value"])
                    .collect()
            };
            let runs = of(false);
            assert!(runs.len() >= 2, "{server} {scenario}: {} runs", runs.len());
            for run in runs {
                for figure in ["echoes_per_sec", "cpu_us_per_echo", "load_cpu_us_per_echo", "p50_us", "rss_bytes"] {
                    assert!(run[figure].as_f64().unwrap() > 0.0, "{figure}: {run}");
                }
                // Syscalls come from perf's own run alone.
                assert!(run["syscalls_per_echo"].is_null(), "{run}");
            }
            // perf's run (taken again if the machine was busy), with its
            // count, for every server; none without perf.
            let counted = of(true);
            assert_eq!(counted.is_empty(), !perf, "{server} {scenario}: {} perf runs", counted.len());
            for run in counted {
                assert!(run["syscalls_per_echo"].as_f64().unwrap() > 0.0, "{run}");
            }
        }
    }
    // E5's open loop, 50,000 messages a second for 0.3 s, every one
    // answered: the rate times the duration, however late a stalled loop
    // wakes.
    for t in takes.iter().filter(|t| t["arm"]["scenario"] == "open-50" && t["arm"]["perf"] == false) {
        let echoes = t["value"]["echoes"].as_u64().unwrap();
        assert!((14_500..=15_000).contains(&echoes), "{t}");
    }
    assert!(stdout.contains("closed-20: 20 connections") && stdout.contains("iomux best / this"), "{stdout}");
    assert!(stdout.contains("TCP_NODELAY") && stdout.contains("no warm-up"), "{stdout}");
    let svg = std::fs::read_to_string(out.join("peers.svg")).unwrap();
    assert!(svg.contains("c-epoll") && svg.contains("tokio"), "{svg}");
    std::fs::remove_dir_all(&out).ok();
}
