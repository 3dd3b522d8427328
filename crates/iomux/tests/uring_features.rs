//! io_uring's optional features (registered ring fd, batched waits,
//! receive bundles, incremental buffers, zero-copy sends), each on and
//! off, on both io_uring backends: the runtime must behave the same
//! whichever are on. Echoes of many sizes (beyond the ring's buffer size
//! and the zero-copy threshold) come back intact and in order, EOF and a
//! reset close as they do without the features, and the stats name what
//! was asked for and what the kernel gave.
//!
//! Nothing here depends on timing: every wait is for an event, bounded by
//! the shared LIMIT only so that a bug fails instead of hanging.

mod runtime_support;

use iomux::runtime::{Config, LoopStats};
use iomux::Backend;
use runtime_support::*;
use std::io::Write;
use std::net::Shutdown;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Which features a run turns on (the rest off).
#[derive(Clone, Copy, Debug)]
struct Features {
    register_ring: bool,
    min_wait: bool,
    bundle: bool,
    buf_inc: bool,
    send_zc: bool,
}

const NONE: Features =
    Features { register_ring: false, min_wait: false, bundle: false, buf_inc: false, send_zc: false };
const ALL: Features = Features { register_ring: true, min_wait: true, bundle: true, buf_inc: true, send_zc: true };

/// Each feature alone, none, and all together.
fn variants() -> Vec<Features> {
    vec![
        NONE,
        Features { register_ring: true, ..NONE },
        Features { min_wait: true, ..NONE },
        Features { bundle: true, ..NONE },
        Features { buf_inc: true, ..NONE },
        Features { send_zc: true, ..NONE },
        ALL,
    ]
}

/// Zero-copy sends from this size on: small enough that many echoes use them.
const ZC_MIN: usize = 2048;

/// A configuration with `f`, and a ring of `buffers` x `size` (small rings
/// make receives span buffers, fill them incrementally and run out).
fn config(backend: Backend, f: Features, buffers: u16, size: usize) -> Config {
    Config::builder()
        .backend(backend)
        .ring_buffers(buffers)
        .ring_buffer_size(size)
        .uring_register_ring(f.register_ring)
        .uring_min_wait(if f.min_wait { Duration::from_micros(200) } else { Duration::ZERO })
        .uring_bundle(f.bundle)
        .uring_buf_inc(f.buf_inc)
        .uring_send_zc_min(if f.send_zc { ZC_MIN } else { 0 })
        .linger(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Message sizes around the ring's buffer size and the zero-copy threshold.
fn sizes(buffer: usize) -> Vec<usize> {
    let mut s = vec![1, 100, buffer - 1, buffer, buffer + 1, 3 * buffer + 5, ZC_MIN - 1, ZC_MIN, 70_000, 300_001];
    s.dedup();
    s
}

/// Three connections at once, each echoing every size in turn (a whole
/// message back before the next), then shutting down its side: every
/// byte comes back in order, then EOF; the server saw EOF (PeerClosed).
fn echoes_intact(backend: Backend, f: Features, buffers: u16, size: usize) -> LoopStats {
    let closes = Arc::new(Mutex::new(Vec::new()));
    let c = closes.clone();
    let server = serve(config(backend, f, buffers, size), 1, move |_| Echo { closes: c.clone() });
    let clients: Vec<_> = (0..3)
        .map(|k| {
            let addr = server.addr;
            thread::spawn(move || {
                let mut s = connect(addr);
                let mut offset = k * 10_000_019;
                for n in sizes(size) {
                    let msg = pattern(offset, n);
                    let writer = send_in_background(&s, msg.clone(), 8192, false);
                    let got = read_exact(&mut s, n);
                    assert_eq!(writer.join().unwrap(), None, "{backend} {f:?}: sending {n} bytes");
                    assert_bytes(&got, &msg, &format!("{backend} {f:?}: echo of {n} bytes"));
                    offset += n;
                }
                s.shutdown(Shutdown::Write).unwrap();
                let (rest, end) = read_to_end(&mut s);
                assert_eq!((rest.len(), end), (0, End::Eof), "{backend} {f:?}: after the echoes");
            })
        })
        .collect();
    for c in clients {
        if c.join().is_err() {
            panic!(
                "{backend} {f:?} ring {buffers} x {size}: a client failed; server closes: {:?}",
                closes.lock().unwrap()
            );
        }
    }
    wait_until("three closes", || closes.lock().unwrap().len() == 3);
    let finished = server.stop();
    assert_eq!(*closes.lock().unwrap(), vec![Reason::PeerClosed; 3], "{backend} {f:?}");
    finished.stats
}

/// A client that resets with its echo unread: the server closes with
/// Reset, as without the features, and keeps serving.
fn reset_mid_stream(backend: Backend, f: Features) {
    let closes = Arc::new(Mutex::new(Vec::new()));
    let c = closes.clone();
    let server = serve(config(backend, f, 8, 4096), 1, move |_| Echo { closes: c.clone() });
    let mut s = connect(server.addr);
    s.write_all(&pattern(0, 200_000)).unwrap();
    reset(s);
    wait_until("the reset connection closes", || closes.lock().unwrap().len() == 1);
    assert_eq!(closes.lock().unwrap()[0], Reason::Reset, "{backend} {f:?}");
    // Still serving.
    let mut s = connect(server.addr);
    s.write_all(b"after").unwrap();
    assert_eq!(read_exact(&mut s, 5), b"after", "{backend} {f:?}");
    drop(s);
    wait_until("the second close", || closes.lock().unwrap().len() == 2);
    server.stop();
}

/// Every feature is named in the stats, asked for as configured, and
/// active or switched off with a reason. Zero-copy sends are made only
/// when active, and always then if `sends_reach_zc_min` (the ring's
/// buffers hold a whole large message; with tiny ones, whether an output
/// reaches ZC_MIN depends on how receives batch up).
fn check_reported(stats: &LoopStats, f: Features, backend: Backend, sends_reach_zc_min: bool) {
    let asked = [
        ("register_ring", f.register_ring),
        ("min_wait", f.min_wait),
        ("bundle", f.bundle),
        ("buf_inc", f.buf_inc),
        ("send_zc", f.send_zc),
    ];
    assert_eq!(stats.uring_features.len(), asked.len(), "{backend}: {:?}", stats.uring_features);
    for (name, requested) in asked {
        let got = stats.uring_features.iter().find(|x| x.name == name).expect(name);
        assert_eq!(got.requested, requested, "{backend} {name}");
        if requested {
            assert!(got.active != got.why_not.is_some(), "{backend} {name}: active or why not: {got:?}");
        } else {
            assert!(!got.active && got.why_not.is_none(), "{backend} {name}: {got:?}");
        }
    }
    let zc_active = stats.uring_features.iter().any(|x| x.name == "send_zc" && x.active);
    if sends_reach_zc_min {
        assert_eq!(zc_active, stats.zero_copy_sends > 0, "{backend}: zero-copy sends made iff active");
    } else {
        assert!(zc_active || stats.zero_copy_sends == 0, "{backend}: zero-copy sends made while not active");
    }
    assert!(stats.zero_copy_copied <= stats.zero_copy_sends);
}

fn every_variant(backend: Backend) {
    for f in variants() {
        // The default incremental ring (16 x 64 KiB), and a tiny one (4 x 1 KiB).
        let stats = echoes_intact(backend, f, 16, 64 << 10);
        check_reported(&stats, f, backend, true);
        let stats = echoes_intact(backend, f, 4, 1024);
        check_reported(&stats, f, backend, false);
        reset_mid_stream(backend, f);
    }
}

#[test]
fn uring_behaves_the_same_with_each_feature() {
    every_variant(Backend::Uring);
}

#[test]
fn uring_sqpoll_behaves_the_same_with_each_feature() {
    every_variant(Backend::UringSqpoll);
}

/// The default configuration asks for the features that win by default
/// and reports all five, on both io_uring backends; the readiness
/// backends report none.
#[test]
fn defaults_are_reported() {
    for backend in Backend::ALL.iter().copied() {
        let closes = Arc::new(Mutex::new(Vec::new()));
        let c = closes.clone();
        let config = Config::builder().backend(backend).build().unwrap();
        let server = serve(config, 1, move |_| Echo { closes: c.clone() });
        let stats = server.stop().stats;
        let uring = matches!(backend, Backend::Uring | Backend::UringSqpoll);
        assert_eq!(stats.uring_features.len(), if uring { 5 } else { 0 }, "{backend}");
    }
}
