//! The uring-sqpoll urgent-data stall (issue 21), outside iomux: an echo
//! server on the io-uring crate alone (an SQPOLL ring, multishot accept,
//! one multishot receive per connection into a provided-buffer ring, one
//! send per receive) and the client of iomux's hostile test (`before`, one
//! byte with MSG_OOB, `after`; the echo must be `before!after`).
//!
//! Each round that does not get its whole echo within 2 s is a stall. For
//! it the program prints what the server's socket still holds unread
//! (FIONREAD on the server's own descriptor, in this same process) and
//! whether one more byte from the client brings the rest: bytes that sit
//! in the socket while the armed multishot receive never completes are the
//! kernel's, not the server's.
//!
//! ```text
//! cargo run --release -p iomux-repro --bin sqpoll-urgent -- [--rounds N] [--busy N] [--no-sqpoll] [--no-oob] [--single]
//! ```
//!
//! `--busy N` starts N spinning threads beside the server (CPU contention);
//! `--no-sqpoll` uses a plain ring; `--no-oob` sends `!` as ordinary data;
//! `--single` receives with one-shot receives (a new one after each
//! completion) instead of a multishot one.
//!
//! The verdict, with what was measured, is in docs/notes/sqpoll-urgent.md.

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::alloc::{alloc_zeroed, Layout};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GROUP: u16 = 7;
const BUFFERS: u16 = 64;
const BUFFER_SIZE: usize = 4096;
const ACCEPT: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;

#[derive(Clone, Copy)]
struct Options {
    rounds: u32,
    busy: u32,
    sqpoll: bool,
    oob: bool,
    multishot: bool,
}

fn parse() -> Result<Options, String> {
    let mut o = Options { rounds: 100, busy: 0, sqpoll: true, oob: true, multishot: true };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |what: &str| -> Result<u32, String> {
            let v = args.next().ok_or(format!("{what} needs a number"))?;
            v.parse().map_err(|_| format!("{what}: not a number: {v:?}"))
        };
        match a.as_str() {
            "--rounds" => o.rounds = number("--rounds")?,
            "--busy" => o.busy = number("--busy")?,
            "--no-sqpoll" => o.sqpoll = false,
            "--no-oob" => o.oob = false,
            "--single" => o.multishot = false,
            "-h" | "--help" => {
                return Err("usage: sqpoll-urgent [--rounds N] [--busy N] [--no-sqpoll] [--no-oob] [--single]".into())
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(o)
}

/// The server's shared view for the client's diagnosis.
#[derive(Default)]
struct Shared {
    /// The descriptor of the newest accepted connection.
    last_fd: AtomicI32,
    /// Receive completions with data, over the whole run.
    receives: AtomicU64,
}

/// A provided-buffer ring: `BUFFERS` entries and their buffers, leaked on
/// purpose (they live as long as the process).
struct BufRing {
    entries: *mut types::BufRingEntry,
    data: *mut u8,
    tail: u16,
}

impl BufRing {
    fn register(ring: &IoUring) -> io::Result<BufRing> {
        let entries_layout = Layout::from_size_align(BUFFERS as usize * 16, 4096).map_err(io::Error::other)?;
        let data_layout = Layout::from_size_align(BUFFERS as usize * BUFFER_SIZE, 4096).map_err(io::Error::other)?;
        // SAFETY: both layouts have non-zero sizes.
        let (entries, data): (*mut types::BufRingEntry, *mut u8) =
            unsafe { (alloc_zeroed(entries_layout).cast(), alloc_zeroed(data_layout)) };
        if entries.is_null() || data.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let mut b = BufRing { entries, data, tail: 0 };
        // SAFETY: `entries` is page-aligned zeroed memory for BUFFERS
        // entries, never freed.
        unsafe { ring.submitter().register_buf_ring_with_flags(entries as u64, BUFFERS, GROUP, 0)? };
        for bid in 0..BUFFERS {
            b.provide(bid);
        }
        Ok(b)
    }

    fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        // SAFETY: bid < BUFFERS and len <= BUFFER_SIZE (the kernel filled
        // at most the buffer's length), inside the leaked block.
        unsafe { std::slice::from_raw_parts(self.data.add(bid as usize * BUFFER_SIZE), len) }
    }

    fn provide(&mut self, bid: u16) {
        // SAFETY: the slot index is masked to the ring's size; the tail
        // field (the reserved field of entry 0) is published with release
        // ordering after the entry is written, as liburing does.
        unsafe {
            let slot = &mut *self.entries.add((self.tail & (BUFFERS - 1)) as usize);
            slot.set_addr(self.data.add(bid as usize * BUFFER_SIZE) as u64);
            slot.set_len(BUFFER_SIZE as u32);
            slot.set_bid(bid);
            self.tail = self.tail.wrapping_add(1);
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

fn push(ring: &mut IoUring, sqe: squeue::Entry) -> io::Result<()> {
    loop {
        // SAFETY: every buffer an entry points at (send data, the buffer
        // ring) outlives its completion: sends own a Vec kept in `sending`.
        if unsafe { ring.submission().push(&sqe) }.is_ok() {
            return Ok(());
        }
        ring.submit()?;
    }
}

fn receive(multishot: bool, fd: RawFd) -> squeue::Entry {
    let entry = if multishot {
        opcode::RecvMulti::new(types::Fd(fd), GROUP).build()
    } else {
        opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), BUFFER_SIZE as u32)
            .buf_group(GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
    };
    entry.user_data(RECV << 32 | fd as u64)
}

fn serve(listener: TcpListener, o: Options, shared: Arc<Shared>) -> io::Result<()> {
    let mut builder = IoUring::builder();
    if o.sqpoll {
        builder.setup_sqpoll(1000);
    }
    let mut ring = builder.build(256)?;
    let mut buffers = BufRing::register(&ring)?;
    let mut sending: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut next_send = 0u64;
    let lfd = listener.as_raw_fd();
    push(&mut ring, opcode::AcceptMulti::new(types::Fd(lfd)).build().user_data(ACCEPT << 32))?;
    loop {
        ring.submit_and_wait(1)?;
        let done: Vec<cqueue::Entry> = ring.completion().collect();
        for c in done {
            let (kind, fd) = (c.user_data() >> 32, (c.user_data() & 0xffff_ffff) as RawFd);
            let more = cqueue::more(c.flags());
            match kind {
                ACCEPT if c.result() >= 0 => {
                    let fd = c.result();
                    let one: libc::c_int = 1;
                    // SAFETY: fd is the descriptor just accepted; the value
                    // is one valid c_int. SO_OOBINLINE as iomux sets it.
                    unsafe {
                        libc::setsockopt(
                            fd,
                            libc::SOL_SOCKET,
                            libc::SO_OOBINLINE,
                            (&one as *const libc::c_int).cast(),
                            4,
                        )
                    };
                    shared.last_fd.store(fd, Ordering::SeqCst);
                    push(&mut ring, receive(o.multishot, fd))?;
                }
                ACCEPT => return Err(io::Error::from_raw_os_error(-c.result())),
                RECV if c.result() > 0 => {
                    shared.receives.fetch_add(1, Ordering::SeqCst);
                    let bid = cqueue::buffer_select(c.flags()).ok_or_else(|| io::Error::other("no buffer id"))?;
                    let data = buffers.buffer(bid, c.result() as usize).to_vec();
                    buffers.provide(bid);
                    let sqe = opcode::Send::new(types::Fd(fd), data.as_ptr(), data.len() as u32)
                        .build()
                        .user_data(SEND << 32 | next_send);
                    sending.insert(next_send, data);
                    next_send += 1;
                    push(&mut ring, sqe)?;
                    if !more {
                        push(&mut ring, receive(o.multishot, fd))?;
                    }
                }
                RECV if c.result() == -libc::ENOBUFS => push(&mut ring, receive(o.multishot, fd))?,
                RECV => {
                    // EOF or an error: the connection is done.
                    // SAFETY: fd is this connection's descriptor, closed once.
                    unsafe { libc::close(fd) };
                }
                SEND => {
                    let sent = sending.remove(&(c.user_data() & 0xffff_ffff));
                    if let Some(data) = sent {
                        if c.result() != data.len() as i32 {
                            eprintln!("server: send of {} bytes returned {}", data.len(), c.result());
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// Reads until `want` bytes came or nothing more comes within `wait`.
fn read_for(s: &mut TcpStream, want: usize, wait: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 64];
    while got.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

fn unread(fd: RawFd) -> i32 {
    let mut n: libc::c_int = -1;
    // SAFETY: FIONREAD writes one c_int; fd is the server's socket, open
    // while its connection is (the client has not closed it yet).
    unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    n
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let listener = match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bind 127.0.0.1:0: {e}");
            std::process::exit(1);
        }
    };
    let addr = listener.local_addr().expect("a bound listener has an address");
    let shared = Arc::new(Shared::default());
    let server_view = shared.clone();
    std::thread::spawn(move || {
        if let Err(e) = serve(listener, o, server_view) {
            eprintln!("server: {e}");
            std::process::exit(1);
        }
    });
    for _ in 0..o.busy {
        std::thread::spawn(|| loop {
            std::hint::spin_loop();
        });
    }
    let mut stalls = 0;
    for round in 0..o.rounds {
        let ms = |on: bool| Duration::from_millis(if on { 20 } else { 0 });
        let (pause_before, pause_after) = (ms(round % 4 == 1 || round % 4 == 3), ms(round % 4 >= 2));
        let mut run = || -> io::Result<()> {
            let mut s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            s.write_all(b"before")?;
            std::thread::sleep(pause_before);
            let flags = if o.oob { libc::MSG_OOB } else { 0 };
            // SAFETY: the fd is open (borrowed from `s`); one valid byte.
            let sent = unsafe { libc::send(s.as_raw_fd(), b"!".as_ptr().cast(), 1, flags) };
            if sent != 1 {
                return Err(io::Error::last_os_error());
            }
            std::thread::sleep(pause_after);
            s.write_all(b"after")?;
            let echoed = read_for(&mut s, 12, Duration::from_secs(2));
            if echoed != b"before!after" {
                stalls += 1;
                let server_fd = shared.last_fd.load(Ordering::SeqCst);
                let left = unread(server_fd);
                let receives = shared.receives.load(Ordering::SeqCst);
                s.write_all(b"?")?;
                let rest = read_for(&mut s, 12 + 1 - echoed.len(), Duration::from_secs(2));
                println!(
                    "round {round} (pauses {pause_before:?}, {pause_after:?}): echoed {:?} within 2 s; the server's \
                     socket (fd {server_fd}) holds {left} byte(s) unread, {receives} receive(s) completed so far; \
                     after one more byte from the client: {:?}",
                    String::from_utf8_lossy(&echoed),
                    String::from_utf8_lossy(&rest)
                );
            }
            Ok(())
        };
        if let Err(e) = run() {
            eprintln!("round {round}: client: {e}");
            std::process::exit(1);
        }
    }
    println!(
        "{stalls} of {} rounds stalled ({}, {} receive, {}, {} busy thread(s))",
        o.rounds,
        if o.sqpoll { "SQPOLL" } else { "no SQPOLL" },
        if o.multishot { "multishot" } else { "one-shot" },
        if o.oob { "urgent byte" } else { "no urgent byte" },
        o.busy
    );
}
