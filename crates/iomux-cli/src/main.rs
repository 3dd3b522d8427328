//! `iomux`: serve, load and bench, built on the iomux library.

mod lab;

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
}

/// Errors at the top of the command: printed once, exit status 1.
pub type CliResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => lab::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("iomux: error: {e}");
            ExitCode::FAILURE
        }
    }
}
