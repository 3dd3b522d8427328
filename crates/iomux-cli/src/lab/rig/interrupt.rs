//! What SIGINT or SIGTERM does to a lab run: kills every process the run
//! started (servers, loads, anchors, clients, and theirs), removes its
//! network namespaces and CPU quota cgroups, then exits with 128 + the
//! signal. Without it, a
//! signal sent to the lab alone (`kill`, `timeout`, a CI runner; unlike a
//! terminal's Ctrl-C, which reaches the whole process group) would end the
//! lab and leave its current server running, bound to no one.

use std::sync::Once;

/// Installs the handler, once per process: at the start of a run, and by
/// anything that makes what only it can undo (a network namespace).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else { return };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let killed = kill_descendants();
                let removed = super::netns::remove_live();
                let quotas = super::quota::remove_live();
                let mut said = format!("iomux bench: stopped by signal {signal}");
                if killed > 0 {
                    said.push_str(&format!("; killed the {killed} process(es) it had started"));
                }
                if !removed.is_empty() {
                    said.push_str(&format!("; removed network namespaces {}", removed.join(", ")));
                }
                if !quotas.is_empty() {
                    said.push_str(&format!("; removed CPU quota cgroups {}", quotas.join(", ")));
                }
                eprintln!("{said}");
                std::process::exit(128 + signal);
            }
        });
    });
}

/// SIGKILLs every descendant of this process: each as it is found, then
/// its own children are looked for (a killed process keeps its /proc
/// entry, and its children's list, until reaped). Returns how many.
fn kill_descendants() -> usize {
    let mut killed = 0;
    let mut queue = children_of(std::process::id());
    while let Some(pid) = queue.pop() {
        queue.extend(children_of(pid));
        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
            if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                killed += 1;
            }
        }
    }
    killed
}

/// The children of every thread of `pid` (a child belongs to the thread
/// that started it: /proc lists it under that task only).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child started from another thread is found too.
    #[test]
    fn children_of_every_thread_are_found() {
        let child = std::thread::spawn(|| std::process::Command::new("sleep").arg("5").spawn().expect("sleep"))
            .join()
            .expect("the spawning thread");
        let found = children_of(std::process::id());
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&child.id()), "{found:?} lacks {}", child.id());
    }
}
