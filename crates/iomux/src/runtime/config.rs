//! [`Config`]: a loop's tuning, built and checked by [`ConfigBuilder`].

use crate::error::{Error, Result};
use crate::poller::Backend;
use std::time::Duration;

/// How a loop runs: the backend and its limits. Build one with
/// [`Config::builder`]; [`Config::default`] is epoll with the defaults
/// listed on each builder method.
///
/// ```
/// use iomux::runtime::Config;
/// use iomux::Backend;
///
/// let config = Config::builder().backend(Backend::Uring).max_conns(10_000).build()?;
/// assert_eq!(config.backend(), Backend::Uring);
///
/// let bad = Config::builder().ring_buffers(1000).build().unwrap_err();
/// assert!(bad.to_string().contains("power of two"));
/// # Ok::<(), iomux::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    pub(crate) backend: Backend,
    pub(crate) max_output: usize,
    pub(crate) max_input: usize,
    pub(crate) max_conns: Option<usize>,
    pub(crate) read_budget: usize,
    pub(crate) read_buffer: usize,
    pub(crate) ring_buffers: Option<u16>,
    pub(crate) ring_buffer_size: Option<usize>,
    pub(crate) uring_register_ring: bool,
    pub(crate) uring_min_wait: Duration,
    pub(crate) uring_bundle: bool,
    pub(crate) uring_buf_inc: bool,
    pub(crate) uring_send_zc_min: usize,
    pub(crate) accept_backoff: Duration,
    pub(crate) drain_timeout: Duration,
    pub(crate) linger: Duration,
    pub(crate) close_timeout: Duration,
    pub(crate) nodelay: bool,
    pub(crate) keepalive: Option<Keepalive>,
    pub(crate) user_timeout: Option<Duration>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) handshake_timeout: Duration,
    pub(crate) inbox_capacity: Option<usize>,
    pub(crate) share_min: usize,
}

/// TCP keepalive: after `idle` without traffic the kernel probes the peer
/// every `interval`, and after `probes` unanswered probes the connection
/// closes with [`CloseReason::PeerVanished`](super::CloseReason::PeerVanished).
/// What reclaims a peer that vanished without a FIN or a reset (power
/// lost, a NAT that forgot the flow, a cable pulled) from an idle
/// connection; [`ConfigBuilder::user_timeout`] does it for one with
/// output in flight. Whole seconds, as the kernel counts them. With a
/// user timeout set too, the kernel ignores `probes` and closes once the
/// connection has been quiet for the user timeout and one probe went
/// unanswered: [`Keepalive::reclaimed_within`] as the user timeout (as
/// `iomux serve` sets it) keeps the probes as counted here.
///
/// ```
/// use iomux::runtime::Keepalive;
/// use std::time::Duration;
///
/// let k = Keepalive::after(Duration::from_secs(300));
/// assert_eq!((k.interval, k.probes), (Duration::from_secs(100), 3));
/// assert_eq!(k.reclaimed_within(), Duration::from_secs(600));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Quiet time before the first probe (TCP_KEEPIDLE).
    pub idle: Duration,
    /// Time between probes (TCP_KEEPINTVL).
    pub interval: Duration,
    /// Unanswered probes that close the connection (TCP_KEEPCNT).
    pub probes: u32,
}

impl Keepalive {
    /// `iomux serve --keepalive SECS`'s rule: the first probe after
    /// `idle`, then one every third of it (rounded up to a whole second),
    /// three of them: a vanished peer is reclaimed within twice `idle`.
    pub fn after(idle: Duration) -> Keepalive {
        let secs = idle.as_secs();
        Keepalive { idle, interval: Duration::from_secs(secs.div_ceil(3).max(1)), probes: 3 }
    }

    /// How long after the last traffic a vanished peer's connection closes
    /// at the latest: `idle` plus every probe's interval.
    pub fn reclaimed_within(&self) -> Duration {
        self.idle + self.interval * self.probes
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            backend: Backend::Epoll,
            max_output: 4 << 20,
            max_input: 4 << 20,
            max_conns: None,
            read_budget: 16,
            read_buffer: 64 << 10,
            ring_buffers: None,
            ring_buffer_size: None,
            uring_register_ring: true,
            uring_min_wait: Duration::ZERO,
            uring_bundle: false,
            uring_buf_inc: true,
            uring_send_zc_min: 0,
            accept_backoff: Duration::from_millis(50),
            drain_timeout: Duration::from_secs(5),
            linger: Duration::from_secs(2),
            close_timeout: Duration::from_secs(30),
            nodelay: true,
            keepalive: None,
            user_timeout: None,
            connect_timeout: None,
            handshake_timeout: Duration::from_secs(10),
            inbox_capacity: None,
            share_min: 1024,
        }
    }
}

impl Config {
    /// A builder starting from the defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder { config: Config::default() }
    }

    /// The mechanism the loop runs on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The per-loop connection limit, if any.
    pub fn max_conns(&self) -> Option<usize> {
        self.max_conns
    }

    /// TCP keepalive on every connection, if set.
    pub fn keepalive(&self) -> Option<Keepalive> {
        self.keepalive
    }

    /// TCP_USER_TIMEOUT on every connection, if set.
    pub fn user_timeout(&self) -> Option<Duration> {
        self.user_timeout
    }

    /// How long an outbound connect may take, if limited.
    pub fn connect_timeout(&self) -> Option<Duration> {
        self.connect_timeout
    }

    /// How long a layered connection's handshake may take.
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// Messages each loop's inbox holds before `try_send` refuses (None: no bound).
    pub fn inbox_capacity(&self) -> Option<usize> {
        self.inbox_capacity
    }

    /// The shortest buffer `write_bytes` shares rather than copies.
    pub fn share_min(&self) -> usize {
        self.share_min
    }

    /// Sets keepalive and the user timeout on a socket (a listener passes
    /// them to the connections it accepts).
    pub(crate) fn apply_liveness(&self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        crate::sys::net::set_liveness(fd, self.liveness())
    }

    /// Keepalive and the user timeout as the socket layer takes them.
    pub(crate) fn liveness(&self) -> crate::sys::net::Liveness {
        (self.keepalive.map(|k| (k.idle, k.interval, k.probes)), self.user_timeout)
    }

    /// io_uring: the provided-buffer ring's buffers and their size, once
    /// it is known whether they are consumed incrementally: what was set,
    /// else 64 KiB buffers when incremental (one serves many small
    /// receives) or 4 KiB ones when not (each receive takes a whole
    /// buffer), and as many as make 1 MiB or 4 MiB respectively.
    pub(crate) fn ring_geometry(&self, incremental: bool) -> (u16, usize) {
        // Incremental buffers hold receives densely, so a smaller ring
        // holds as many; and one the CPU's caches keep cost less per byte
        // on E3's loopback sink (here, medians of 7 rotating 3 s runs:
        // 0.1245 CPU s per GB with 16 x 64 KiB, 0.1379 with 64 x 64 KiB).
        let (ring_bytes, default_size) = if incremental { (1 << 20, 64 << 10) } else { (4 << 20, 4 << 10) };
        let size = self.ring_buffer_size.unwrap_or(default_size);
        let count = self.ring_buffers.unwrap_or_else(|| {
            let fit = (ring_bytes / size).clamp(1, 32768);
            // The largest power of two that fits.
            1 << (usize::BITS - 1 - fit.leading_zeros())
        });
        (count, size)
    }
}

/// Builds a [`Config`]; [`build`](ConfigBuilder::build) says which value is
/// wrong and why.
#[derive(Clone, Debug)]
pub struct ConfigBuilder {
    config: Config,
}

impl ConfigBuilder {
    /// The mechanism (default: epoll, or see [`Backend::from_env`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.config.backend = backend;
        self
    }
    /// Output bytes queued per connection before the loop stops reading
    /// it (default 4 MiB); reading resumes at half of it.
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.config.max_output = bytes;
        self
    }
    /// Input bytes a handler may leave unconsumed before the connection
    /// closes with `InputLimit` (default 4 MiB).
    pub fn max_input(mut self, bytes: usize) -> Self {
        self.config.max_input = bytes;
        self
    }
    /// Connections open at once per loop, at most (default: no limit);
    /// accepting pauses at the limit and resumes when one closes.
    pub fn max_conns(mut self, conns: usize) -> Self {
        self.config.max_conns = Some(conns);
        self
    }
    /// Edge-triggered epoll: reads per event before the connection yields
    /// to the others (default 16).
    pub fn read_budget(mut self, reads: usize) -> Self {
        self.config.read_budget = reads;
        self
    }
    /// The most new bytes one [`Handler::on_data`](super::Handler::on_data)
    /// call is offered, on every backend (default 64 KiB); and on
    /// select/poll/epoll the size of the loop's one read buffer. Input the
    /// backend received at once (io_uring after a pause, say) is offered
    /// in slices of this size, so a relay that pauses once the other
    /// side's output passes its bound queues at most one slice more. A
    /// handler that consumes nothing of a slice is offered it again with
    /// up to this many bytes more, so a request of any size reaches it
    /// whole.
    pub fn read_buffer(mut self, bytes: usize) -> Self {
        self.config.read_buffer = bytes;
        self
    }
    /// io_uring: buffers in the provided-buffer ring, a power of two up
    /// to 32768 (default: as many as make 1 MiB when consumed
    /// incrementally, else 4 MiB). The ring is the loop's whole receive
    /// memory.
    pub fn ring_buffers(mut self, count: u16) -> Self {
        self.config.ring_buffers = Some(count);
        self
    }
    /// io_uring: bytes per ring buffer (default 64 KiB when consumed
    /// incrementally, see [`uring_buf_inc`](Self::uring_buf_inc), else 4 KiB).
    pub fn ring_buffer_size(mut self, bytes: usize) -> Self {
        self.config.ring_buffer_size = Some(bytes);
        self
    }
    /// io_uring: register the ring's descriptor with the loop's thread
    /// (IORING_REGISTER_RING_FDS, Linux 5.18), so that each
    /// `io_uring_enter` skips looking it up (default on).
    pub fn uring_register_ring(mut self, on: bool) -> Self {
        self.config.uring_register_ring = on;
        self
    }
    /// io_uring: batched waits. A loop with nothing to do waits up to this
    /// long for every request in flight to complete, then returns as soon
    /// as one has (IORING_ENTER_EXT_ARG's min_wait_usec, Linux 6.12): fewer
    /// wake-ups and enters per completion, for up to this much latency
    /// when few completions come (default: zero, off).
    pub fn uring_min_wait(mut self, wait: Duration) -> Self {
        self.config.uring_min_wait = wait;
        self
    }
    /// io_uring: receive bundles (IORING_RECVSEND_BUNDLE, Linux 6.10): one
    /// receive completion may fill several ring buffers (default off).
    pub fn uring_bundle(mut self, on: bool) -> Self {
        self.config.uring_bundle = on;
        self
    }
    /// io_uring: incremental buffer consumption (IOU_PBUF_RING_INC, Linux
    /// 6.12): a receive takes only the bytes it needs of a ring buffer, so
    /// one big buffer serves many small receives and a large read needs no
    /// large per-connection memory (default on).
    pub fn uring_buf_inc(mut self, on: bool) -> Self {
        self.config.uring_buf_inc = on;
        self
    }
    /// io_uring: writes of at least this many bytes go out with zero-copy
    /// sends (IORING_OP_SEND_ZC, Linux 6.0): the kernel sends from the
    /// pages themselves instead of copying them, and the buffer is held
    /// until the kernel's notification. Pays only for large writes to a
    /// real network device; over loopback the kernel copies anyway
    /// (default: zero, off). Output that holds shared buffers
    /// ([`Io::write_bytes`](super::Io::write_bytes)) goes out gathered,
    /// and gathered sends are not zero-copy.
    pub fn uring_send_zc_min(mut self, bytes: usize) -> Self {
        self.config.uring_send_zc_min = bytes;
        self
    }
    /// The first pause of accepting after EMFILE/ENFILE (default 50 ms);
    /// it doubles while accepting keeps failing, up to one second, and
    /// ends early when a connection closes.
    pub fn accept_backoff(mut self, pause: Duration) -> Self {
        self.config.accept_backoff = pause;
        self
    }
    /// How long a graceful stop keeps flushing output (default 5 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }
    /// How long a closing connection, its output sent and FIN sent,
    /// waits for the peer's EOF before it closes anyway (default 2 s).
    pub fn linger(mut self, linger: Duration) -> Self {
        self.config.linger = linger;
        self
    }
    /// How long [`Io::close`](super::Io::close) waits for the peer to take
    /// the output still queued (default 30 s); then the connection closes
    /// without it ([`CloseReason::CloseTimeout`](super::CloseReason::CloseTimeout)),
    /// so a peer that stops reading cannot hold a descriptor and its output
    /// forever.
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.config.close_timeout = timeout;
        self
    }
    /// TCP_NODELAY on outbound connections (default on; listeners always
    /// set it, and accepted connections inherit it).
    pub fn nodelay(mut self, on: bool) -> Self {
        self.config.nodelay = on;
        self
    }
    /// TCP keepalive on every connection, accepted and outbound (default:
    /// none, the kernel's default of no probes; `iomux serve` sets
    /// [`Keepalive::after`] 300 s, as redis's `tcp-keepalive`). Each value
    /// in whole seconds from 1 to 32767, and 1 to 127 probes (the
    /// kernel's limits).
    pub fn keepalive(mut self, keepalive: Option<Keepalive>) -> Self {
        self.config.keepalive = keepalive;
        self
    }
    /// TCP_USER_TIMEOUT on every connection: output unacknowledged for
    /// this long closes it with
    /// [`CloseReason::PeerVanished`](super::CloseReason::PeerVanished)
    /// (default: none, the kernel's retransmission limit, about 15
    /// minutes). From 1 ms to 2^31-1 ms (the kernel takes an `int`).
    pub fn user_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.user_timeout = timeout;
        self
    }

    /// How long an outbound connect ([`Io::connect`](super::Io::connect))
    /// may take before the connection closes with
    /// [`CloseReason::ConnectTimeout`](super::CloseReason::ConnectTimeout)
    /// (default: none, the kernel's SYN retries: about 2 minutes for a
    /// peer that drops them).
    ///
    /// ```
    /// use iomux::runtime::Config;
    /// use std::time::Duration;
    ///
    /// let config = Config::builder().connect_timeout(Some(Duration::from_secs(3))).build()?;
    /// assert_eq!(config.connect_timeout(), Some(Duration::from_secs(3)));
    /// assert!(Config::builder().connect_timeout(Some(Duration::ZERO)).build().is_err());
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// How long a layered connection's handshake ([`Io::set_layer`](super::Io::set_layer))
    /// may take, from the layer's setting (for an outbound connection
    /// its connect included), before the connection closes with
    /// [`CloseReason::HandshakeTimeout`](super::CloseReason::HandshakeTimeout)
    /// (default: 10 s). A peer that opens connections and stalls their
    /// handshakes holds no more than this.
    ///
    /// ```
    /// use iomux::runtime::Config;
    /// use std::time::Duration;
    ///
    /// let config = Config::builder().handshake_timeout(Duration::from_secs(3)).build()?;
    /// assert_eq!(config.handshake_timeout(), Duration::from_secs(3));
    /// assert!(Config::builder().handshake_timeout(Duration::ZERO).build().is_err());
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.config.handshake_timeout = timeout;
        self
    }

    /// Messages each loop's inbox holds before [`Sender::try_send`](super::Sender::try_send)
    /// refuses more (default: none, no bound). [`Sender::send`](super::Sender::send)
    /// queues past it; the deepest an inbox got is in
    /// [`LoopStats::inbox_peak`](super::LoopStats::inbox_peak).
    ///
    /// ```
    /// use iomux::runtime::Config;
    ///
    /// assert!(Config::builder().inbox_capacity(Some(1024)).build().is_ok());
    /// assert!(Config::builder().inbox_capacity(Some(0)).build().is_err());
    /// ```
    pub fn inbox_capacity(mut self, messages: Option<usize>) -> Self {
        self.config.inbox_capacity = messages;
        self
    }

    /// The shortest buffer [`Io::write_bytes`](super::Io::write_bytes)
    /// shares rather than copies (default 1 KiB): below it one copy into
    /// the output costs less than sending a reference with the rest in a
    /// gathered send. Fan-out of small messages to many connections may
    /// set it lower to share each message once.
    ///
    /// ```
    /// use iomux::runtime::Config;
    ///
    /// let config = Config::builder().share_min(64).build()?;
    /// assert_eq!(config.share_min(), 64);
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn share_min(mut self, bytes: usize) -> Self {
        self.config.share_min = bytes;
        self
    }

    /// Checks every value.
    pub fn build(self) -> Result<Config> {
        let c = &self.config;
        let invalid = |field: &'static str, reason: String| Err(Error::InvalidConfig { field, reason });
        if c.max_output == 0 {
            return invalid("max_output", "must be at least 1 byte".into());
        }
        if c.max_conns == Some(0) {
            return invalid(
                "max_conns",
                "must be at least 1 (a loop that may hold no connection serves nobody)".into(),
            );
        }
        if c.read_budget == 0 {
            return invalid("read_budget", "must be at least 1 read".into());
        }
        if c.read_buffer == 0 {
            return invalid("read_buffer", "must be at least 1 byte".into());
        }
        if let Some(n) = c.ring_buffers.filter(|n| !n.is_power_of_two() || *n > 32768) {
            return invalid("ring_buffers", format!("{n} is not a power of two from 1 to 32768"));
        }
        if let Some(size) = c.ring_buffer_size.filter(|s| *s == 0 || *s > u32::MAX as usize) {
            return invalid("ring_buffer_size", format!("{size} is not between 1 and 2^32-1 bytes"));
        }
        if let Some(k) = c.keepalive {
            let whole = |d: Duration| d.subsec_nanos() == 0 && (1..=32767).contains(&d.as_secs());
            if !whole(k.idle) || !whole(k.interval) || !(1..=127).contains(&k.probes) {
                return invalid(
                    "keepalive",
                    format!(
                        "{k:?}: idle and interval are whole seconds from 1 to 32767, probes from 1 to 127 \
                         (the kernel's limits)"
                    ),
                );
            }
        }
        if let Some(t) = c.user_timeout.filter(|t| t.is_zero() || t.as_millis() > i32::MAX as u128) {
            return invalid("user_timeout", format!("{t:?} is not between 1 ms and 2^31-1 ms"));
        }
        if c.inbox_capacity == Some(0) {
            return invalid("inbox_capacity", "must be at least 1 message (None: no bound)".into());
        }
        if c.handshake_timeout.is_zero() {
            return invalid("handshake_timeout", "must be longer than zero".into());
        }
        // Each is added to the clock: past a day it is a mistake, and far
        // past it the sum would overflow.
        let timeouts = [
            ("handshake_timeout", Some(c.handshake_timeout)),
            ("close_timeout", Some(c.close_timeout)),
            ("linger", Some(c.linger)),
            ("drain_timeout", Some(c.drain_timeout)),
            ("connect_timeout", c.connect_timeout),
        ];
        for (field, timeout) in timeouts {
            if let Some(t) = timeout.filter(|t| *t > Duration::from_secs(86400)) {
                return invalid(field, format!("{t:?} is more than a day"));
            }
        }
        if c.connect_timeout.is_some_and(|t| t.is_zero()) {
            return invalid("connect_timeout", "must be longer than zero (None waits for the kernel)".into());
        }
        if c.uring_min_wait > Duration::from_secs(1) {
            return invalid(
                "uring_min_wait",
                format!("{:?} is more than the 1 s a batched wait may take", c.uring_min_wait),
            );
        }
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_and_user_timeout_take_the_kernel_limits() {
        let refused = |b: ConfigBuilder| b.build().map(|_| ()).map_err(|e| e.to_string());
        let k = |idle: u64, interval: u64, probes: u32| Keepalive {
            idle: Duration::from_secs(idle),
            interval: Duration::from_secs(interval),
            probes,
        };
        assert_eq!(refused(Config::builder().keepalive(Some(k(1, 1, 1)))), Ok(()));
        assert_eq!(refused(Config::builder().keepalive(Some(k(32767, 32767, 127)))), Ok(()));
        for bad in [k(0, 1, 1), k(1, 0, 1), k(1, 1, 0), k(32768, 1, 1), k(1, 1, 128)] {
            let e = refused(Config::builder().keepalive(Some(bad))).expect_err("out of the kernel's range");
            assert!(e.contains("keepalive"), "{e}");
        }
        let half = Keepalive { idle: Duration::from_millis(1500), ..k(1, 1, 1) };
        assert!(refused(Config::builder().keepalive(Some(half))).is_err(), "whole seconds only");
        assert!(refused(Config::builder().user_timeout(Some(Duration::ZERO))).is_err());
        let longest = Duration::from_millis(i32::MAX as u64);
        assert_eq!(refused(Config::builder().user_timeout(Some(longest))), Ok(()));
        let too_long = longest + Duration::from_millis(1);
        assert!(refused(Config::builder().user_timeout(Some(too_long))).is_err(), "negative as the kernel's int");
        assert_eq!(refused(Config::builder().user_timeout(Some(Duration::from_millis(1)))), Ok(()));
    }

    #[test]
    fn keepalive_after_probes_three_times_a_third_apart() {
        let k = Keepalive::after(Duration::from_secs(10));
        assert_eq!((k.interval, k.probes, k.reclaimed_within()), (Duration::from_secs(4), 3, Duration::from_secs(22)));
        assert_eq!(Keepalive::after(Duration::from_secs(1)).interval, Duration::from_secs(1));
    }
}
