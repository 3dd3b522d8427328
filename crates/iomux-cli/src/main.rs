//! `iomux`: serve, load and bench, built on the iomux library.

mod apps;
mod flags;
mod lab;
mod limits;
mod load;
mod numbers;
mod os;
mod peer;
mod progress;
mod serve;
mod stats;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// High-concurrency networking on Linux: one event loop over select, poll,
/// epoll (level/edge) and io_uring, and a lab that measures them.
#[derive(Parser)]
#[command(name = "iomux", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Reproduce the documents' experiments on this machine and write
    /// JSON, Markdown tables and SVG plots (quick settings unless --full).
    Bench(lab::BenchArgs),
    /// Serve echo or sink on any backend until SIGINT/SIGTERM, then print
    /// (and optionally write) the server's stats. With --procs, several
    /// worker processes under one parent.
    Serve(serve::ServeArgs),
    /// Drive a server with active and idle connections (closed or open
    /// loop), check every echoed byte, report throughput and latency.
    Load(load::LoadArgs),
    /// Check the kernel's limits (descriptors, ports, backlogs, conntrack,
    /// TCP memory) against a run of --conns connections, and say the
    /// `sysctl -w` that lifts each one in the way. Changes nothing.
    Limits(limits::LimitsArgs),
    /// Merge results of `iomux load --json` (shards, processes, separate
    /// runs) exactly: counts add, latency histograms add; print the
    /// summary and write the merged JSON. Exits non-zero if the merged
    /// result counts errors.
    Merge(load::merge::MergeArgs),
    /// Join the results in DIR (from iomux bench) into DIR/report.html.
    /// With two folders, `iomux report A B` compares them side by side
    /// (two machines, two kernels, before and after a change): every
    /// figure of A and B with its ratio B/A, and the verdicts of each, in
    /// B/compare-<name of A>.html (or --out FILE).
    Report {
        /// A results folder, e.g. results/2026-11-21T12-00-00Z; with B, the
        /// folder compared against (A, "before")
        #[arg(value_name = "DIR|A")]
        dir: std::path::PathBuf,
        /// A second results folder to compare with the first ("after")
        #[arg(value_name = "B")]
        other: Option<std::path::PathBuf>,
        /// Where to write the comparison [default: B/compare-<name of A>.html]
        #[arg(long, value_name = "FILE", requires = "other")]
        out: Option<std::path::PathBuf>,
    },
    /// Another runtime's echo server, for the lab to measure beside
    /// iomux's: prints `iomux peer: NAME listening on ADDR (pid PID)`,
    /// then serves until killed.
    #[command(hide = true)]
    Peer(peer::PeerArgs),
    /// The lab's delay line for E8 where the kernel has no netem: holds
    /// each packet of an NFQUEUE for its delay, then accepts it.
    #[command(hide = true)]
    Netq(lab::rig::netq::NetqArgs),
}

/// Parses a backend name; the error lists the valid ones.
pub fn parse_backend(s: &str) -> Result<iomux::Backend, String> {
    s.parse().map_err(|e: iomux::Error| e.to_string())
}

/// Errors at the top of the command: printed once, exit status 1. Each
/// step adds its context (`anyhow::Context`) and keeps the cause as the
/// error's source, so `chain` prints "what was being done: why".
pub type CliResult<T> = anyhow::Result<T>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => lab::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Load(args) => load::run(args),
        Command::Limits(args) => limits::run(args),
        Command::Merge(args) => load::merge::run(args),
        Command::Peer(args) => peer::run(args),
        Command::Netq(args) => lab::rig::netq::run(args),
        Command::Report { dir, other: None, .. } => lab::report(&dir).map(|(path, verdicts)| {
            print!("{verdicts}");
            println!("wrote {}", path.display());
            for line in lab::rig::browser::screenshot_and_check(&path) {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }),
        Command::Report { dir, other: Some(b), out } => {
            lab::report::compare::write(&dir, &b, out.as_deref()).map(|w| {
                print!("{}", w.summary);
                println!("wrote {}", w.path.display());
                ExitCode::SUCCESS
            })
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("iomux: error: {}", one_line(e));
            ExitCode::FAILURE
        }
    }
}

/// An error and every cause under it, "outer: inner: kernel's", each
/// once (a message that already quotes its cause is not repeated).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        cause = c.source();
    }
    text
}

/// A command's error as one line, as main prints it: for a failure kept
/// as text (a cell's "why not measurable", a worker's reason to stop),
/// where `to_string()` would say only the outermost context.
pub fn one_line(e: impl std::borrow::Borrow<anyhow::Error>) -> String {
    chain(e.borrow().as_ref())
}
