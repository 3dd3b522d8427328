//! `iomux serve`: echo or sink on any backend, N share-nothing loops, in
//! one process or (`--procs`) in several under a supervising parent.

mod supervisor;
mod tls;

use crate::apps::http::{HttpServer, HttpSettings};
use crate::apps::proxy::{ProxyCounts, ProxyServer, Upstream};
use crate::apps::{Proto, Server};
use crate::flags::Flags;
use crate::stats::{server_stats, summary, write_json};
use crate::CliResult;
use anyhow::{bail, Context as _};
use iomux::runtime::{Config, ConfigBuilder, Control, Keepalive, Runtime};
use iomux::Backend;
use iomux_http::Limits;
use std::ffi::OsString;
use std::io::{Read, Write};
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
    /// Worker processes, each with its own listeners on the address
    /// (SO_REUSEPORT), under a parent that starts them, passes SIGINT/SIGTERM
    /// on (each drains; a second signal ends them at once), restarts one that
    /// dies, and merges their stats. Every other flag applies to each worker:
    /// --threads, --max-conns, --nofile (one process may hold only its
    /// RLIMIT_NOFILE of descriptors), --cpu. Exit status 3: a worker died
    /// unexpectedly (even if it was restarted), or died more than 5 times
    /// within 10 s and the server stopped.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    procs: u16,
    /// Connections per loop at most; accepting pauses at the limit.
    #[arg(long, value_parser = at_least_one)]
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
    /// to a power of two, at most 32768) [default: as many as make 1 MiB
    /// with --uring-buf-inc on, else 4 MiB]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=32768))]
    ring_buffers: Option<u16>,
    /// io_uring: bytes per ring buffer. Bigger buffers receive bulk data
    /// with fewer completions; a paused connection can overshoot its
    /// output bound by what the ring holds [default: 65536 with
    /// --uring-buf-inc on, else 4096]
    #[arg(long, value_parser = clap::value_parser!(u32).range(64..=(1 << 20)))]
    ring_buffer_size: Option<u32>,
    /// io_uring: register the ring's descriptor with each loop's thread
    /// (IORING_REGISTER_RING_FDS), so that enters skip looking it up
    /// [default: on]
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    uring_register_ring: Option<bool>,
    /// io_uring: batched waits: a loop with nothing to do waits up to this
    /// many microseconds for every request in flight, then returns at the
    /// first completion (IORING_ENTER_EXT_ARG min_wait, Linux 6.12). Fewer
    /// enters with many busy connections; up to this much more latency
    /// when few of many connections are active. 0: off [default: 0]
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    uring_min_wait_us: Option<u32>,
    /// io_uring: receive bundles: one completion fills several ring
    /// buffers (IORING_RECVSEND_BUNDLE, Linux 6.10) [default: off]
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    uring_bundle: Option<bool>,
    /// io_uring: incremental buffer consumption: a receive takes only the
    /// bytes it needs of a ring buffer, so one big buffer serves many small
    /// receives (IOU_PBUF_RING_INC, Linux 6.12) [default: on]
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    uring_buf_inc: Option<bool>,
    /// io_uring: writes of at least this many bytes go out as zero-copy
    /// sends (IORING_OP_SEND_ZC); over loopback the kernel copies anyway.
    /// 0: off [default: 0]
    #[arg(long, value_name = "BYTES")]
    uring_send_zc_min: Option<usize>,
    /// http: request line and headers at most, in bytes; more is answered
    /// 431 and the connection closed (nginx: large_client_header_buffers).
    #[arg(long, default_value_t = 8 << 10, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(64..=(1 << 20)))]
    http_max_head: u32,
    /// http: request body at most, in bytes; more is answered 413 and the
    /// connection closed (nginx: client_max_body_size).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(0..=(256 << 20)))]
    http_max_body: u32,
    /// http: seconds for a request head to arrive, from its first byte (for
    /// a new connection, from accept), and the longest pause while a body
    /// arrives; then 408 and close. Ends slowloris clients
    /// (nginx: client_header_timeout, client_body_timeout).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    http_header_timeout: f64,
    /// http: seconds an idle keep-alive connection is kept between requests
    /// (nginx: keepalive_timeout, 75 s).
    #[arg(long, default_value_t = 75.0, value_name = "SECONDS")]
    http_idle_timeout: f64,
    /// TCP keepalive, in seconds: a connection quiet for SECS is probed
    /// every SECS/3 (rounded up) and closes after 3 unanswered probes;
    /// output left unacknowledged as long (TCP_USER_TIMEOUT, SECS + 3 x
    /// SECS/3 rounded up) closes it too, and so does a client that reads
    /// nothing for that long. So a peer that vanished without a FIN or a
    /// reset (power lost, a NAT timeout, a cable pulled) is reclaimed
    /// within about 2 x SECS, counted as "vanished". On a lossy link keep
    /// it above the retransmission backoff to ride out: at 5% loss,
    /// --keepalive 1 ended connections TCP would have recovered (E8,
    /// docs/experiments/faults.md). 0: off, the kernel's
    /// defaults (no probes; about 15 minutes of retransmissions). The
    /// default is redis's tcp-keepalive; nginx's so_keepalive is off
    /// unless set.
    #[arg(long, default_value_t = 300, value_name = "SECS", value_parser = clap::value_parser!(u16).range(0..=32767))]
    keepalive: u16,
    /// echo and sink: close a connection that sends nothing for this many
    /// seconds, counted as "idle" [default: never]. http has its own
    /// (--http-idle-timeout).
    #[arg(long, value_name = "SECONDS")]
    idle_timeout: Option<f64>,
    /// proxy: where to relay each connection: host:port, or unix:PATH for a
    /// Unix stream socket.
    #[arg(long, value_name = "ADDR", value_parser = parse_upstream)]
    upstream: Option<Upstream>,
    /// proxy: bytes one side may hold unsent before the other side is no
    /// longer read (resumed at half of it); less than --max-output.
    #[arg(long, default_value_t = 256 << 10, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1024..=(256 << 20)))]
    proxy_buffer: u32,
    /// proxy: seconds an upstream connect may take before its client is
    /// closed (haproxy: timeout connect).
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    connect_timeout: f64,
    /// proxy: relay a direction by splice(2), in the kernel, instead of
    /// copying it through the proxy: auto from its first full read (16
    /// KiB, bulk data; as haproxy's option splice-auto), always from its
    /// first byte, or off. Costs a pipe (two descriptors) per spliced
    /// direction. The default is what E9 measured cheaper per byte
    /// (docs/experiments/proxy.md).
    #[arg(long, value_enum, default_value_t = SpliceMode::Auto)]
    splice: SpliceMode,
    /// resp: when a pub/sub subscriber that does not read is dropped, as
    /// redis's client-output-buffer-limit pubsub: HARD,SOFT,SECONDS with
    /// redis's units; past HARD bytes queued at once, past SOFT for SECONDS
    /// (0 turns a limit off). Counted in the stats' pubsub.slow_dropped.
    #[arg(long, default_value = "32mb,8mb,60", value_name = "HARD,SOFT,SECONDS", value_parser = crate::apps::pubsub::Limits::parse)]
    pubsub_limit: crate::apps::pubsub::Limits,
    #[command(flatten)]
    tls: tls::TlsArgs,
    /// Worker N of a --procs parent: listen with SO_REUSEPORT, stop when
    /// the parent's end of stdin closes, leave the summary to the parent.
    #[arg(long, hide = true)]
    worker: Option<u16>,
}

impl ServeArgs {
    fn http_settings(&self) -> HttpSettings {
        HttpSettings {
            limits: Limits { max_head: self.http_max_head as usize, max_body: self.http_max_body as usize },
            header_timeout: Duration::from_secs_f64(self.http_header_timeout),
            idle_timeout: Duration::from_secs_f64(self.http_idle_timeout),
        }
    }

    /// The flags worker `n` runs with: these flags, with the backend made
    /// explicit, the address concrete, one process, and its own stats file.
    fn worker_args(&self, n: u16, backend: Backend, listen: SocketAddr, stats_file: PathBuf) -> Vec<OsString> {
        // Destructured so that a new flag cannot be forgotten here.
        let ServeArgs {
            backend: _,
            proto,
            listen: _,
            threads,
            procs: _,
            max_conns,
            max_output,
            drain_timeout,
            nofile,
            stats_file: _,
            cpu,
            ring_buffers,
            ring_buffer_size,
            uring_register_ring,
            uring_min_wait_us,
            uring_bundle,
            uring_buf_inc,
            uring_send_zc_min,
            http_max_head,
            http_max_body,
            http_header_timeout,
            http_idle_timeout,
            keepalive,
            idle_timeout,
            upstream,
            proxy_buffer,
            connect_timeout,
            splice,
            pubsub_limit,
            tls: tls::TlsArgs { tls_cert, tls_key, tls_self_signed: _, tls_suites, tls_groups, tls_no_resumption },
            worker: _,
        } = self;
        let mut f = Flags::default();
        f.value("backend", backend.name())
            .value("proto", proto.name())
            .value("listen", listen)
            .value("threads", threads)
            .value("procs", 1)
            .value("max-output", max_output)
            // Rust prints the shortest text that parses back to the same f64.
            .value("drain-timeout", drain_timeout)
            .value("worker", n)
            .value("http-max-head", http_max_head)
            .value("http-max-body", http_max_body)
            .value("http-header-timeout", http_header_timeout)
            .value("http-idle-timeout", http_idle_timeout)
            .value("keepalive", keepalive)
            .optional("idle-timeout", *idle_timeout)
            .optional("upstream", upstream.as_ref().map(Upstream::to_arg))
            .value("proxy-buffer", proxy_buffer)
            .value("connect-timeout", connect_timeout)
            .value("splice", splice.name())
            .value(
                "pubsub-limit",
                format!("{}b,{}b,{}", pubsub_limit.hard, pubsub_limit.soft, pubsub_limit.soft_for.as_secs()),
            )
            .optional("ring-buffers", *ring_buffers)
            .optional("ring-buffer-size", *ring_buffer_size)
            .optional("uring-register-ring", uring_register_ring.map(on_off_name))
            .optional("uring-min-wait-us", *uring_min_wait_us)
            .optional("uring-bundle", uring_bundle.map(on_off_name))
            .optional("uring-buf-inc", uring_buf_inc.map(on_off_name))
            .optional("uring-send-zc-min", *uring_send_zc_min)
            .optional("max-conns", *max_conns)
            .optional("nofile", *nofile)
            .optional("cpu", *cpu)
            // A made certificate is passed as files (`run`): none is made again.
            .paths("tls-cert", tls_cert)
            .paths("tls-key", tls_key)
            .optional("tls-suites", (!tls_suites.is_empty()).then(|| tls_suites.join(",")))
            .optional("tls-groups", (!tls_groups.is_empty()).then(|| tls_groups.join(",")))
            .switch("tls-no-resumption", *tls_no_resumption)
            .path("stats-file", Some(&stats_file));
        f.into_args()
    }
}

fn parse_upstream(s: &str) -> Result<Upstream, String> {
    Upstream::parse(s)
}

/// A switch: `on` or `off`.
fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?} is neither on nor off")),
    }
}

fn on_off_name(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// A count that must be at least 1 (`--max-conns 0` would refuse every
/// connection).
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// proxy: the most bytes one read takes, and so one send relays. 16 KiB
/// (haproxy's tune.bufsize) costs less CPU per GB than the library's 64 KiB
/// default: 1 GiB through the proxy in a 50% CPU quota, five alternating
/// pairs, epoll 38-43 ticks against 47-50, uring 47-56 against 56-77
/// (docs/experiments/proxy.md).
const PROXY_READ: usize = 16 << 10;

/// `--splice`: when the proxy relays a direction by splice(2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SpliceMode {
    Auto,
    Always,
    Off,
}

impl SpliceMode {
    fn name(self) -> &'static str {
        match self {
            SpliceMode::Auto => "auto",
            SpliceMode::Always => "always",
            SpliceMode::Off => "off",
        }
    }

    /// The read size from which a direction is spliced.
    fn threshold(self) -> Option<usize> {
        match self {
            SpliceMode::Auto => Some(PROXY_READ),
            SpliceMode::Always => Some(1),
            SpliceMode::Off => None,
        }
    }
}

pub fn run(mut args: ServeArgs) -> CliResult<ExitCode> {
    let (backend, config) = check(&args)?;
    let alpn: &[&[u8]] = if args.proto == Proto::Http { &[b"http/1.1"] } else { &[] };
    let tls = args.tls.setup(alpn)?;
    if args.procs > 1 {
        if let Some(tls) = &tls {
            // One certificate for every worker: a made one is read from its files.
            args.tls.tls_cert.clone_from(&tls.certs);
            args.tls.tls_key.clone_from(&tls.keys);
            args.tls.tls_self_signed = None;
            if tls.made {
                println!("iomux serve: {}", tls.describe());
            }
        }
        return supervisor::run(&args, backend);
    }
    serve(args, backend, config, tls.as_ref())
}

/// Refuses bad input before anything starts (for --procs, before any
/// worker does); returns the backend and the loops' configuration.
fn check(args: &ServeArgs) -> CliResult<(Backend, Config)> {
    if args.worker.is_some() && args.procs > 1 {
        bail!("a worker runs as one process (--procs 1)");
    }
    if args.proto == Proto::Resp && args.procs > 1 {
        bail!(
            "--proto resp keeps one keyspace in one process; --procs would split it into several \
                    (a SET in one unseen by a GET in another): use --threads for more loops"
        );
    }
    // The figures are written when the server stops: refuse a path they
    // could not go to now, before serving.
    if let Some(path) = &args.stats_file {
        crate::stats::check_writable(path)?;
    }
    let backend = match args.backend {
        Some(b) => b,
        None => Backend::from_env()?,
    };
    if !(0.0..=3600.0).contains(&args.drain_timeout) {
        bail!("--drain-timeout must be between 0 and 3600 seconds");
    }
    for (flag, seconds) in
        [("--http-header-timeout", args.http_header_timeout), ("--http-idle-timeout", args.http_idle_timeout)]
    {
        if !(0.001..=86400.0).contains(&seconds) {
            bail!("{flag} must be between 0.001 and 86400 seconds");
        }
    }
    if let Some(seconds) = args.idle_timeout {
        if !(0.001..=86400.0).contains(&seconds) {
            bail!("--idle-timeout must be between 0.001 and 86400 seconds");
        }
        if !matches!(args.proto, Proto::Echo | Proto::Sink | Proto::Proxy) {
            bail!(
                "--idle-timeout is for echo, sink and proxy (http has --http-idle-timeout; resp has none), not {}",
                args.proto.name()
            );
        }
    }
    match (args.proto, &args.upstream) {
        (Proto::Proxy, None) => bail!("--proto proxy needs --upstream host:port or unix:PATH"),
        (Proto::Proxy, Some(_)) => {}
        (other, Some(_)) => bail!("--upstream is for --proto proxy, not {}", other.name()),
        (_, None) => {}
    }
    if !(0.001..=3600.0).contains(&args.connect_timeout) {
        bail!("--connect-timeout must be between 0.001 and 3600 seconds");
    }
    if args.proto == Proto::Proxy && args.proxy_buffer as usize + PROXY_READ >= args.max_output {
        // The loop's own bound would pause the receiving side first.
        bail!(
            "--proxy-buffer ({}) plus one read ({PROXY_READ}) must stay below --max-output ({})",
            args.proxy_buffer,
            args.max_output
        );
    }
    let http = args.http_settings();
    let mut config = Config::builder()
        .backend(backend)
        .max_output(args.max_output.max(1))
        .connect_timeout(Some(Duration::from_secs_f64(args.connect_timeout)))
        .drain_timeout(Duration::from_secs_f64(args.drain_timeout));
    config = with_keepalive(config, args.keepalive);
    if let Some(max) = args.max_conns {
        config = config.max_conns(max);
    }
    if args.proto == Proto::Proxy {
        config = config.read_buffer(PROXY_READ);
    }
    if args.proto == Proto::Http {
        // Room for one whole request still arriving; the handler answers
        // 431/413 before more can pile up.
        config = config.max_input(http.limits.max_pending().max(64 << 10));
    }
    if args.proto == Proto::Resp {
        // Room for the largest request redis takes: one bulk string of
        // proto-max-bulk-len with its header.
        config = config.max_input(iomux_resp::Limits::default().max_bulk_len + (64 << 10));
        // Pub/sub deliveries between loops: bounded, publishers held back.
        config = config.inbox_capacity(Some(crate::apps::pubsub::INBOX_CAPACITY));
    }
    if let Some(n) = args.ring_buffers {
        config = config.ring_buffers(n.next_power_of_two());
    }
    if let Some(size) = args.ring_buffer_size {
        config = config.ring_buffer_size(size as usize);
    }
    if let Some(on) = args.uring_register_ring {
        config = config.uring_register_ring(on);
    }
    if let Some(us) = args.uring_min_wait_us {
        config = config.uring_min_wait(Duration::from_micros(u64::from(us)));
    }
    if let Some(on) = args.uring_bundle {
        config = config.uring_bundle(on);
    }
    if let Some(on) = args.uring_buf_inc {
        config = config.uring_buf_inc(on);
    }
    if let Some(bytes) = args.uring_send_zc_min {
        config = config.uring_send_zc_min(bytes);
    }
    Ok((backend, config.build()?))
}

/// One process serving: the whole server, or one worker of a --procs parent.
fn serve(args: ServeArgs, backend: Backend, config: Config, tls: Option<&tls::TlsSetup>) -> CliResult<ExitCode> {
    match args.nofile {
        Some(n) => crate::os::set_nofile_soft(n).with_context(|| format!("setting RLIMIT_NOFILE to {n}"))?,
        None => {
            crate::os::raise_nofile_limit().context("raising RLIMIT_NOFILE")?;
        }
    }
    let threads = usize::from(args.threads);
    let mut runtime = Runtime::new(config, threads)?;
    if args.worker.is_some() {
        runtime = runtime.reuse_port();
    }
    let runtime = runtime.bind(args.listen)?.stop_on_signals();
    if args.worker.is_some() {
        stop_when_orphaned(runtime.control())?;
    }
    let addr = runtime.local_addr().context("no listening address")?;
    let banner = format!(
        "iomux serve: listening on {addr} (pid {}, backend {backend}, proto {}, {threads} thread{}{})",
        std::process::id(),
        args.proto.name(),
        if threads == 1 { "" } else { "s" },
        tls.map(|t| format!(", {}", t.describe())).unwrap_or_default()
    );
    // "listening" only once every loop is set up: a client may connect at once.
    let runtime = runtime.on_ready(move || {
        println!("{banner}");
        let _ = std::io::stdout().flush();
    });
    let (cpu, proto) = (args.cpu, args.proto);
    let pin = move || {
        if let Some(cpu) = cpu {
            if let Err(e) = crate::os::pin_to_cpu(cpu) {
                eprintln!("iomux serve: cannot pin to CPU {cpu}: {e}");
            }
        }
    };
    let mut extra = crate::stats::ServerStats { proto: Some(proto.name().to_string()), ..Default::default() };
    let stats = if proto == Proto::Http {
        let settings = args.http_settings();
        let finished = tls::run_loops(runtime, tls, &mut extra, |_| {
            pin();
            HttpServer::new(settings)
        })?;
        let responses: u64 = finished.handlers.iter().map(|h| h.responses).sum();
        let timeouts: u64 = finished.handlers.iter().map(|h| h.timeouts).sum();
        (extra.http_responses, extra.http_timeouts) = (Some(responses), Some(timeouts));
        finished.stats
    } else if proto == Proto::Resp {
        use crate::apps::pubsub::{Hub, PubsubCounts, Registry};
        let keys = crate::apps::resp::Keyspace::new();
        let (registry, senders, limits) = (Registry::shared(), runtime.senders()?, args.pubsub_limit);
        let finished = tls::run_loops(runtime, tls, &mut extra, |i| {
            pin();
            let hub = Hub::new(i, registry.clone(), senders.clone(), limits);
            crate::apps::resp::RespServer::new(keys.clone(), iomux_resp::Limits::default(), hub)
        })?;
        let replies: u64 = finished.handlers.iter().map(|h| h.replies).sum();
        let errors: u64 = finished.handlers.iter().map(|h| h.errors).sum();
        let mut pubsub = PubsubCounts::default();
        finished.handlers.iter().for_each(|h| pubsub.add(&h.hub.counts));
        (extra.resp_replies, extra.resp_errors, extra.pubsub) = (Some(replies), Some(errors), Some(pubsub));
        finished.stats
    } else if let (Proto::Proxy, Some(upstream)) = (proto, &args.upstream) {
        let (buffer, idle) = (args.proxy_buffer as usize, args.idle_timeout.map(Duration::from_secs_f64));
        let splice_at = args.splice.threshold();
        let finished = tls::run_loops(runtime, tls, &mut extra, |_| {
            pin();
            ProxyServer::new(upstream.clone(), buffer, idle).splicing_from(splice_at)
        })?;
        let mut counts = ProxyCounts::default();
        finished.handlers.iter().for_each(|h| counts.add(&h.counts));
        extra.proxy = Some(counts);
        finished.stats
    } else {
        tls::run_loops(runtime, tls, &mut extra, |_| {
            pin();
            Server::new(proto, args.idle_timeout.map(Duration::from_secs_f64))
        })?
        .stats
    };
    // The loops' figures, and what the protocol's handlers counted.
    let mut stats = server_stats(&stats, backend)?;
    stats.merge(&extra);
    // A worker's figures are one part of the parent's summary.
    if args.worker.is_none() {
        eprintln!("iomux serve: stopped. {}", summary(&stats));
    }
    if let Some(path) = &args.stats_file {
        write_json(path, &serde_json::to_value(&stats)?)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A worker's stdin is a pipe whose other end only its parent holds: when
/// it reads EOF the parent is gone (killed with SIGKILL, say), and the
/// worker drains and stops instead of holding the port for no one.
fn stop_when_orphaned(control: Control) -> CliResult<()> {
    std::thread::Builder::new()
        .name("parent-watch".into())
        .stack_size(64 << 10)
        .spawn(move || {
            let mut buf = [0u8; 64];
            // Nothing is ever written: any end of reading means the parent left.
            while let Ok(1..) = std::io::stdin().read(&mut buf) {}
            control.stop();
        })
        .context("cannot start the thread that watches the parent")?;
    Ok(())
}

/// `--keepalive SECS` (serve and load): keepalive after SECS of quiet,
/// and a user timeout as long as the probes take; 0 leaves both off.
pub(crate) fn with_keepalive(config: ConfigBuilder, secs: u16) -> ConfigBuilder {
    if secs == 0 {
        return config;
    }
    let keepalive = Keepalive::after(Duration::from_secs(u64::from(secs)));
    config.keepalive(Some(keepalive)).user_timeout(Some(keepalive.reclaimed_within()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parse(args: &[&str]) -> ServeArgs {
        let argv = std::iter::once("serve").chain(args.iter().copied());
        Cli::try_parse_from(argv).map_err(|e| e.to_string()).unwrap().serve
    }

    /// Worker `n`'s flags as `parent` would pass them, parsed back.
    fn worker_of(parent: &ServeArgs, n: u16, backend: Backend, addr: SocketAddr, stats: &std::path::Path) -> ServeArgs {
        let argv = parent.worker_args(n, backend, addr, stats.to_path_buf());
        let argv: Vec<&str> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        parse(&argv)
    }

    /// A worker runs with its parent's flags, except what it must have
    /// of its own.
    #[test]
    fn worker_args_carry_every_flag() {
        let parent = parse(&[
            "--proto=sink",
            "--listen=[::1]:0",
            "--threads=2",
            "--procs=4",
            "--max-conns=7",
            "--max-output=999",
            "--drain-timeout=0.1",
            "--nofile=5000",
            "--stats-file=/tmp/x.json",
            "--cpu=1",
            "--ring-buffers=8",
            "--ring-buffer-size=128",
            "--uring-register-ring=off",
            "--uring-min-wait-us=50",
            "--uring-bundle=on",
            "--uring-buf-inc=off",
            "--uring-send-zc-min=65536",
            "--http-max-head=1000",
            "--http-max-body=5",
            "--http-header-timeout=2.5",
            "--http-idle-timeout=30",
            "--keepalive=45",
            "--idle-timeout=2.5",
            "--tls-cert=/tmp/cert.pem",
            "--tls-key=/tmp/key.pem",
            "--tls-cert=/tmp/b.pem",
            "--tls-key=/tmp/b-key.pem",
            "--tls-suites=TLS13_AES_128_GCM_SHA256,TLS13_AES_256_GCM_SHA384",
            "--tls-groups=X25519",
            "--tls-no-resumption",
        ]);
        let addr: SocketAddr = "[::1]:4321".parse().unwrap();
        let stats = std::env::temp_dir().join("iomux-worker-args-test.json");
        let worker = worker_of(&parent, 3, Backend::Uring, addr, &stats);
        let expected = ServeArgs {
            backend: Some(Backend::Uring),
            listen: addr,
            procs: 1,
            stats_file: Some(stats),
            worker: Some(3),
            ..parent
        };
        assert_eq!(format!("{worker:?}"), format!("{expected:?}"));
        assert!(check(&worker).is_ok());
        let plain = parse(&[]).worker_args(0, Backend::Epoll, addr, "/tmp/0.json".into());
        assert!(!plain.iter().any(|a| a == "--max-conns" || a == "--nofile" || a == "--cpu"));
        assert!(!plain
            .iter()
            .any(|a| a.to_str().is_some_and(|a| a.starts_with("--uring-") || a.starts_with("--ring-"))));
    }

    /// A proxy's workers relay to the same upstream, with its settings.
    #[test]
    fn worker_args_carry_the_proxy_flags() {
        let parent = parse(&[
            "--proto=proxy",
            "--procs=2",
            "--upstream=unix:/run/app.sock",
            "--proxy-buffer=65536",
            "--connect-timeout=0.25",
            "--idle-timeout=30",
            "--splice=always",
        ]);
        let addr: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        let stats = std::env::temp_dir().join("iomux-worker-proxy-args-test.json");
        let worker = worker_of(&parent, 1, Backend::Epoll, addr, &stats);
        assert_eq!(worker.upstream, Some(Upstream::Unix("/run/app.sock".into())));
        assert_eq!((worker.proxy_buffer, worker.connect_timeout, worker.splice), (65536, 0.25, SpliceMode::Always));
        assert!(check(&worker).is_ok());
    }

    /// A made certificate is written where asked and makes a config; a
    /// key without its certificate, or a file that is not PEM, is refused
    /// by name before anything is served.
    #[test]
    fn tls_flags_are_checked_before_serving() {
        let dir = crate::os::PrivateDir::new("iomux-tls-test", "a test certificate").unwrap();
        let made = parse(&["--tls-self-signed", dir.path().to_str().unwrap()]).tls.setup(&[]).unwrap().unwrap();
        let (cert, key) = (made.certs[0].to_str().unwrap(), made.keys[0].to_str().unwrap());
        assert!(made.made && made.certs[0].starts_with(dir.path()));
        let pem = std::fs::read_to_string(cert).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        let loaded = parse(&["--tls-cert", cert, "--tls-key", key]);
        assert!(loaded.tls.setup(&[b"http/1.1"]).unwrap().is_some_and(|t| !t.made));
        // Twice the same pair: a config that chooses by SNI.
        let twice = parse(&["--tls-cert", cert, "--tls-key", key, "--tls-cert", cert, "--tls-key", key]);
        assert!(twice.tls.setup(&[]).unwrap().is_some_and(|t| t.describe().ends_with("chosen by SNI")));
        let unpaired = parse(&["--tls-cert", cert, "--tls-key", key, "--tls-cert", cert]);
        let err = unpaired.tls.setup(&[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(err, "2 --tls-cert and 1 --tls-key: each certificate needs its key");
        assert!(parse_err(&["--tls-key=/tmp/k.pem"]).contains("--tls-cert"));
        let pinned_alone =
            parse(&["--tls-suites", "TLS13_AES_128_GCM_SHA256"]).tls.setup(&[]).err().map(|e| e.to_string());
        assert!(pinned_alone.is_some_and(|e| e.contains("need --tls-cert or --tls-self-signed")));
        let bad_suite = parse(&["--tls-cert", cert, "--tls-key", key, "--tls-suites", "AES"]).tls.setup(&[]);
        assert!(bad_suite.err().is_some_and(|e| e.to_string().starts_with("no TLS suite is named \"AES\"")));
        let swapped = parse(&["--tls-cert", key, "--tls-key", cert]);
        let err = swapped.tls.setup(&[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("key.pem"), "{err}");
        assert!(parse(&[]).tls.setup(&[]).unwrap().is_none());
    }

    #[test]
    fn a_worker_is_one_process() {
        assert!(check(&parse(&["--worker=1", "--procs=2"])).is_err());
        assert!(parse_err(&["--procs=0"]).contains("--procs"));
        assert!(parse_err(&["--procs=257"]).contains("--procs"));
    }

    fn parse_err(args: &[&str]) -> String {
        let argv = std::iter::once("serve").chain(args.iter().copied());
        Cli::try_parse_from(argv).err().map(|e| e.to_string()).unwrap_or_default()
    }
}
