//! `iomux serve`: echo or sink on any backend, N share-nothing loops.

use crate::apps::{Proto, Server};
use crate::stats::{stats_json, write_json};
use crate::CliResult;
use iomux::runtime::{Config, Control, Listeners};
use iomux::Backend;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Mechanism: select, poll, epoll, epoll-et, uring, uring-sqpoll
    /// [default: $IOMUX_BACKEND, else epoll]
    #[arg(long, short, value_parser = crate::parse_backend)]
    backend: Option<Backend>,
    /// What to serve.
    #[arg(long, value_enum, default_value_t = Proto::Echo)]
    proto: Proto,
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Independent loops, each with its own SO_REUSEPORT listener.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
    /// Connections per loop at most; accepting pauses at the limit.
    #[arg(long)]
    max_conns: Option<usize>,
    /// Output bytes queued per connection before it stops being read.
    #[arg(long, default_value_t = 4 << 20)]
    max_output: usize,
    /// On SIGINT/SIGTERM, how long to keep flushing output, in seconds.
    #[arg(long, default_value_t = 5.0)]
    drain_timeout: f64,
    /// Set the soft open-files limit (default: raise it to the hard limit).
    #[arg(long)]
    nofile: Option<u64>,
    /// Write the final stats as JSON here.
    #[arg(long)]
    stats_file: Option<PathBuf>,
    /// Pin every loop thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// io_uring: buffers in each loop's provided-buffer ring (rounded up
    /// to a power of two, at most 32768).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u16).range(1..=32768))]
    ring_buffers: u16,
    /// io_uring: bytes per ring buffer. Bigger buffers receive bulk data
    /// with fewer completions; a paused connection can overshoot its
    /// output bound by what the ring holds.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(64..=(1 << 20)))]
    ring_buffer_size: u32,
}

pub fn run(args: ServeArgs) -> CliResult<ExitCode> {
    let backend = match args.backend {
        Some(b) => b,
        None => Backend::from_env()?,
    };
    if !(0.0..=3600.0).contains(&args.drain_timeout) {
        return Err("--drain-timeout must be between 0 and 3600 seconds".into());
    }
    match args.nofile {
        Some(n) => crate::os::set_nofile_soft(n).map_err(|e| format!("setting RLIMIT_NOFILE to {n}: {e}"))?,
        None => {
            crate::os::raise_nofile_limit().map_err(|e| format!("raising RLIMIT_NOFILE: {e}"))?;
        }
    }
    // Signals go to a thread of their own, which stops the loops; block
    // them before any loop thread exists so no loop ever receives one.
    let signals = [libc::SIGINT, libc::SIGTERM];
    crate::os::block_signals(&signals)?;
    let control = Control::new();
    {
        let control = control.clone();
        std::thread::Builder::new().name("iomux-signals".into()).spawn(move || {
            if crate::os::wait_signal(&signals).is_ok() {
                control.stop();
            }
        })?;
    }
    let config = Config {
        backend,
        max_output: args.max_output.max(1),
        max_conns: args.max_conns,
        drain_timeout: Duration::from_secs_f64(args.drain_timeout),
        ring_buffers: args.ring_buffers,
        ring_buffer_size: args.ring_buffer_size as usize,
        ..Config::default()
    };
    let listeners = Listeners::bind(args.listen, usize::from(args.threads))?;
    let addr = listeners.local_addr();
    println!(
        "iomux serve: listening on {addr} (pid {}, backend {backend}, proto {:?}, {} thread{})",
        std::process::id(),
        args.proto,
        args.threads,
        if args.threads == 1 { "" } else { "s" }
    );
    std::io::stdout().flush()?;
    let cpu = args.cpu;
    let stats = listeners.serve(
        &config,
        |_| {
            if let Some(cpu) = cpu {
                if let Err(e) = crate::os::pin_to_cpu(cpu) {
                    eprintln!("iomux serve: cannot pin to CPU {cpu}: {e}");
                }
            }
            Server::new(args.proto)
        },
        &control,
    )?;
    let json = stats_json(&stats, backend, &[("proto", format!("{:?}", args.proto).to_lowercase())])?;
    eprintln!(
        "iomux serve: stopped. {} connections accepted, {} closed ({} abnormally, {} refused); \
         {} bytes in, {} out; {} syscalls ({:.3} per read); cpu user {:.3}s sys {:.3}s; peak RSS {} KiB",
        stats.accepted,
        stats.closed,
        stats.closed_abnormally,
        stats.refused,
        stats.bytes_in,
        stats.bytes_out,
        stats.syscalls.total(),
        stats.syscalls.total() as f64 / stats.reads.max(1) as f64,
        json["user_cpu_s"].as_f64().unwrap_or(0.0),
        json["sys_cpu_s"].as_f64().unwrap_or(0.0),
        json["peak_rss_bytes"].as_u64().unwrap_or(0) / 1024,
    );
    if let Some(path) = &args.stats_file {
        write_json(path, &json)?;
    }
    Ok(ExitCode::SUCCESS)
}
