//! What a loop did, for `--stats-file` and the lab.

use crate::sys::SyscallCounts;
use std::time::Duration;

/// What one loop did (or several, merged).
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LoopStats {
    /// How many loops these figures cover.
    pub loops: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Outbound connections established.
    pub connected: u64,
    /// Connections closed, for whatever reason.
    pub closed: u64,
    /// Closes that were not orderly (reset, error, input limit, failed
    /// connect, vanished peer).
    pub closed_abnormally: u64,
    /// Of them, peers that vanished: keepalive's probes or the user
    /// timeout ran out ([`CloseReason::PeerVanished`](super::CloseReason::PeerVanished)).
    pub vanished: u64,
    /// Orderly closes of idle connections ([`Io::close_idle`](super::Io::close_idle)).
    pub idle_closed: u64,
    /// Bytes received and delivered to the handler.
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Of `bytes_in`, the bytes spliced to another connection
    /// ([`Io::splice`](super::Io::splice)), never copied to user space.
    pub spliced: u64,
    /// Reads (or receive completions) that delivered data to the handler.
    pub reads: u64,
    /// Loop turns: waits (readiness) or enters (io_uring).
    pub turns: u64,
    /// Accepted connections the backend could not watch (select beyond
    /// FD_SETSIZE), closed at once.
    pub refused: u64,
    /// Messages handed to [`Handler::on_message`](super::Handler::on_message).
    pub messages: u64,
    /// The most messages this loop's inbox held at once (the deepest over
    /// loops, merged).
    pub inbox_peak: u64,
    /// [`Sender::try_send`](super::Sender::try_send)s this loop's inbox
    /// refused as full.
    pub inbox_refused: u64,
    /// Times accepting paused for EMFILE/ENFILE.
    pub accept_backoffs: u64,
    /// Gathered sends that sent something: of several buffers at once
    /// (`sendmsg`, or io_uring's IORING_OP_SENDMSG), made when the handler
    /// shared buffers ([`Io::write_bytes`](super::Io::write_bytes)).
    pub gathered_sends: u64,
    /// The most output bytes queued on one connection at any time.
    pub peak_output: u64,
    /// Connections open at the same time, at most.
    pub peak_conns: u64,
    /// Syscalls the loop's threads made, by kind.
    pub syscalls: SyscallCounts,
    /// How long the loop ran (the longest one's, when merged).
    pub wall: Duration,
    /// io_uring: the setup the kernel accepted (e.g. "single_issuer+defer_taskrun").
    pub uring_setup: Option<&'static str>,
    /// io_uring: each optional feature of the configuration, whether it
    /// was asked for and whether the loop uses it (or why not).
    pub uring_features: Vec<UringFeature>,
    /// io_uring: zero-copy sends made.
    pub zero_copy_sends: u64,
    /// io_uring: zero-copy sends the kernel copied anyway
    /// (IORING_NOTIF_USAGE_ZC_COPIED; loopback always does).
    pub zero_copy_copied: u64,
}

/// One optional io_uring feature of a loop's [`Config`](super::Config),
/// as the kernel allowed it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UringFeature {
    /// Its name: `register_ring`, `min_wait`, `bundle`, `buf_inc` or
    /// `send_zc` (the [`ConfigBuilder`](super::ConfigBuilder) method
    /// without `uring_`, and `iomux serve`'s flag).
    pub name: &'static str,
    /// The configuration asked for it.
    pub requested: bool,
    /// The loop uses it.
    pub active: bool,
    /// Why a requested feature is not active (the kernel lacks it).
    pub why_not: Option<String>,
}

impl LoopStats {
    /// Adds another loop's figures: counts add up, `peak_output` and
    /// `wall` stay maxima, and `peak_conns` adds up (the loops' peaks need
    /// not coincide: the sum bounds the process's peak from above).
    pub fn merge(&mut self, o: &LoopStats) {
        self.loops += o.loops;
        self.accepted += o.accepted;
        self.connected += o.connected;
        self.closed += o.closed;
        self.closed_abnormally += o.closed_abnormally;
        self.vanished += o.vanished;
        self.idle_closed += o.idle_closed;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.spliced += o.spliced;
        self.reads += o.reads;
        self.turns += o.turns;
        self.accept_backoffs += o.accept_backoffs;
        self.refused += o.refused;
        self.messages += o.messages;
        self.inbox_peak = self.inbox_peak.max(o.inbox_peak);
        self.inbox_refused += o.inbox_refused;
        self.gathered_sends += o.gathered_sends;
        self.peak_output = self.peak_output.max(o.peak_output);
        self.peak_conns += o.peak_conns;
        self.syscalls.merge(&o.syscalls);
        self.wall = self.wall.max(o.wall);
        self.uring_setup = self.uring_setup.or(o.uring_setup);
        if self.uring_features.is_empty() {
            self.uring_features = o.uring_features.clone();
        }
        self.zero_copy_sends += o.zero_copy_sends;
        self.zero_copy_copied += o.zero_copy_copied;
    }
}
