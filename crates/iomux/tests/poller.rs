//! The readiness contract, asserted on every mechanism. Where a mechanism
//! cannot do a mode, the test asserts the Unsupported error instead.

use iomux::{Backend, Error, Events, Interest, Mode, Poller, Syscall, Token};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const T: Token = Token(7);
/// Long enough that a ready fd is reported on a loaded machine.
const SOON: Duration = Duration::from_secs(2);
/// How long we wait to be sure that nothing is reported.
const QUIET: Duration = Duration::from_millis(50);

fn open(backend: Backend) -> Box<dyn Poller> {
    backend.open().unwrap_or_else(|e| panic!("open {backend}: {e}"))
}

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().expect("socketpair");
    a.set_nonblocking(true).expect("nonblocking");
    (a, b)
}

/// The events reported for token `T` by one wait.
fn wait_for(p: &mut dyn Poller, timeout: Duration) -> Vec<iomux::Event> {
    let mut events = Events::with_capacity(16);
    p.wait(&mut events, Some(timeout)).expect("wait");
    events.iter().filter(|e| e.token() == T).collect()
}

fn drain(s: &mut UnixStream) {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => panic!("drain: {e}"),
        }
    }
}

fn expect_unsupported(backend: Backend, result: iomux::Result<()>, mode: Mode) {
    match result {
        Err(Error::Unsupported { backend: name, mode: m }) => {
            assert_eq!(m, mode);
            assert_eq!(name, open(backend).name());
        }
        other => panic!("{backend}: expected Unsupported for {mode:?}, got {other:?}"),
    }
}

fn level_rereports_until_drained(backend: Backend) {
    let mut p = open(backend);
    let (mut a, mut b) = pair();
    p.add(a.as_raw_fd(), T, Interest::READABLE, Mode::Level).unwrap();
    assert!(wait_for(&mut *p, QUIET).is_empty(), "{backend}: reported before any data");
    b.write_all(b"x").unwrap();
    for round in 0..3 {
        let evs = wait_for(&mut *p, SOON);
        assert_eq!(evs.len(), 1, "{backend}: round {round}: level must re-report unread data");
        assert!(evs[0].is_readable());
    }
    drain(&mut a);
    assert!(wait_for(&mut *p, QUIET).is_empty(), "{backend}: reported after drain");
}

fn edge_reports_once_per_arrival(backend: Backend) {
    let mut p = open(backend);
    let (a, mut b) = pair();
    let added = p.add(a.as_raw_fd(), T, Interest::READABLE, Mode::Edge);
    if !p.supports(Mode::Edge) {
        return expect_unsupported(backend, added, Mode::Edge);
    }
    added.unwrap();
    b.write_all(b"1").unwrap();
    let evs = wait_for(&mut *p, SOON);
    assert_eq!(evs.len(), 1, "{backend}: first arrival");
    assert!(evs[0].is_readable());
    assert!(wait_for(&mut *p, QUIET).is_empty(), "{backend}: edge re-reported unread data");
    b.write_all(b"2").unwrap();
    assert_eq!(wait_for(&mut *p, SOON).len(), 1, "{backend}: second arrival not reported");
    assert!(wait_for(&mut *p, QUIET).is_empty(), "{backend}: edge re-reported after second arrival");
}

fn oneshot_reports_once_until_rearmed(backend: Backend) {
    let mut p = open(backend);
    let (a, mut b) = pair();
    let fd = a.as_raw_fd();
    p.add(fd, T, Interest::READABLE, Mode::Oneshot).unwrap();
    b.write_all(b"x").unwrap();
    assert_eq!(wait_for(&mut *p, SOON).len(), 1, "{backend}: oneshot first report");
    assert!(wait_for(&mut *p, QUIET).is_empty(), "{backend}: oneshot reported twice");
    b.write_all(b"y").unwrap();
    assert!(wait_for(&mut *p, QUIET).is_empty(), "{backend}: disarmed oneshot reported new data");
    p.modify(fd, T, Interest::READABLE, Mode::Oneshot).unwrap();
    assert_eq!(wait_for(&mut *p, SOON).len(), 1, "{backend}: modify did not re-arm");
}

fn writable_fires_with_send_space(backend: Backend) {
    let mut p = open(backend);
    let (a, _b) = pair();
    p.add(a.as_raw_fd(), T, Interest::WRITABLE, Mode::Level).unwrap();
    let evs = wait_for(&mut *p, SOON);
    assert_eq!(evs.len(), 1, "{backend}: writable");
    assert!(evs[0].is_writable() && !evs[0].is_readable());
}

fn peer_close_is_reported(backend: Backend) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let mut p = open(backend);
    p.add(server.as_raw_fd(), T, Interest::READABLE, Mode::Level).unwrap();
    assert!(wait_for(&mut *p, QUIET).is_empty());
    drop(client);
    let evs = wait_for(&mut *p, SOON);
    assert_eq!(evs.len(), 1, "{backend}: peer close not reported");
    assert!(evs[0].is_readable(), "{backend}: a closed peer must read as readable (EOF)");
    // select has no hang-up bit; every other mechanism reports one.
    if backend != Backend::Select {
        assert!(evs[0].is_read_closed(), "{backend}: hang-up not reported: {:?}", evs[0]);
    }
}

fn delete_stops_reports(backend: Backend) {
    let mut p = open(backend);
    let (a, mut b) = pair();
    p.add(a.as_raw_fd(), T, Interest::READABLE, Mode::Level).unwrap();
    b.write_all(b"x").unwrap();
    assert_eq!(wait_for(&mut *p, SOON).len(), 1);
    p.delete(a.as_raw_fd()).unwrap();
    assert!(wait_for(&mut *p, QUIET).is_empty(), "{backend}: deleted fd still reported");
    // Registering it again works and sees the unread byte.
    p.add(a.as_raw_fd(), T, Interest::READABLE, Mode::Level).unwrap();
    assert_eq!(wait_for(&mut *p, SOON).len(), 1, "{backend}: re-added fd not reported");
}

fn wait_honours_timeout(backend: Backend) {
    let mut p = open(backend);
    let (a, _b) = pair();
    p.add(a.as_raw_fd(), T, Interest::READABLE, Mode::Level).unwrap();
    let mut events = Events::with_capacity(4);
    for asked in [Duration::from_millis(30), Duration::from_millis(120)] {
        let start = Instant::now();
        let n = p.wait(&mut events, Some(asked)).unwrap();
        let took = start.elapsed();
        assert_eq!(n, 0, "{backend}: nothing was ready");
        assert!(took >= asked, "{backend}: woke after {took:?}, earlier than {asked:?}");
        assert!(took < asked + Duration::from_millis(500), "{backend}: {took:?} for a {asked:?} wait");
    }
    let start = Instant::now();
    assert_eq!(p.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
    assert!(start.elapsed() < Duration::from_millis(100), "{backend}: zero timeout blocked");
}

fn waker_wakes_blocked_wait(backend: Backend) {
    let mut p = open(backend);
    let wake_token = Token(99);
    let waker = p.waker(wake_token).unwrap();
    assert!(matches!(p.waker(Token(1)), Err(Error::AlreadyExists { .. })), "{backend}: second waker");
    for _ in 0..2 {
        let w = waker.clone();
        let start = Instant::now();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            w.wake().unwrap();
        });
        let mut events = Events::with_capacity(4);
        let n = p.wait(&mut events, None).unwrap();
        t.join().unwrap();
        assert_eq!(n, 1, "{backend}: one wake, one event");
        assert_eq!(events.iter().next().unwrap().token(), wake_token);
        assert!(start.elapsed() >= Duration::from_millis(90), "{backend}: woke before the wake");
        // A consumed wake does not fire again.
        assert_eq!(p.wait(&mut events, Some(QUIET)).unwrap(), 0, "{backend}: wake reported twice");
    }
}

fn error_cases(backend: Backend) {
    let mut p = open(backend);
    let name = p.name();
    let (a, _b) = pair();
    let fd = a.as_raw_fd();
    p.add(fd, T, Interest::READABLE, Mode::Level).unwrap();
    match p.add(fd, T, Interest::READABLE, Mode::Level) {
        Err(Error::AlreadyExists { backend: b, fd: f }) => assert_eq!((b, f), (name, fd)),
        other => panic!("{backend}: double add gave {other:?}"),
    }
    let (c, _d) = pair();
    let other = c.as_raw_fd();
    match p.modify(other, T, Interest::READABLE, Mode::Level) {
        Err(Error::NotFound { backend: b, fd: f }) => assert_eq!((b, f), (name, other)),
        r => panic!("{backend}: modify of unknown fd gave {r:?}"),
    }
    match p.delete(other) {
        Err(Error::NotFound { backend: b, fd: f }) => assert_eq!((b, f), (name, other)),
        r => panic!("{backend}: delete of unknown fd gave {r:?}"),
    }
    // A descriptor number nobody has open (select needs one below 1024).
    let closed = closed_fd_number(if backend == Backend::Select { 1023 } else { 19_000 });
    match p.add(closed, T, Interest::READABLE, Mode::Level) {
        Err(e @ Error::Sys { .. }) => {
            assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{backend}: {e}");
            assert!(e.to_string().contains(&format!("fd {closed}")), "{backend}: error does not name the fd: {e}");
        }
        r => panic!("{backend}: add of closed fd {closed} gave {r:?}"),
    }
    match p.add(-1, T, Interest::READABLE, Mode::Level) {
        Err(e @ Error::BadFd { backend: b, fd: -1 }) => {
            assert_eq!(b, name);
            assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{backend}: fd -1 gave {e}");
        }
        r => panic!("{backend}: fd -1 gave {r:?}"),
    }
}

/// The highest free descriptor number at or below `start`.
fn closed_fd_number(start: RawFd) -> RawFd {
    (0..=start).rev().find(|fd| !std::path::Path::new(&format!("/proc/self/fd/{fd}")).exists()).unwrap()
}

/// How many syscalls one wait costs, by kind, on a wait that finds nothing.
fn wait_syscalls(backend: Backend) {
    let mut p = open(backend);
    let (a, _b) = pair();
    p.add(a.as_raw_fd(), T, Interest::READABLE, Mode::Level).unwrap();
    let mut events = Events::with_capacity(4);
    // Settle queued registrations first (io_uring submits them on a wait).
    p.wait(&mut events, Some(Duration::ZERO)).unwrap();
    let waits = 100;
    let before = iomux::syscalls::counts();
    for _ in 0..waits {
        p.wait(&mut events, Some(Duration::from_micros(1))).unwrap();
    }
    let spent = iomux::syscalls::counts().since(&before);
    let (kind, per_wait) = match backend {
        Backend::Select => (Syscall::Pselect6, 1),
        Backend::Poll => (Syscall::Ppoll, 1),
        Backend::Epoll | Backend::EpollEt => (Syscall::EpollPwait, 1),
        Backend::Uring | Backend::UringSqpoll => (Syscall::IoUringEnter, 1),
    };
    assert_eq!(spent.get(kind), waits * per_wait, "{backend}: {:?}", spent.nonzero().collect::<Vec<_>>());
    assert_eq!(
        spent.total(),
        waits * per_wait,
        "{backend}: other syscalls in wait: {:?}",
        spent.nonzero().collect::<Vec<_>>()
    );
}

macro_rules! for_each_backend {
    ($($name:ident => $backend:expr),+ $(,)?) => {$(
        mod $name {
            use super::*;
            #[test] fn level() { level_rereports_until_drained($backend) }
            #[test] fn edge() { edge_reports_once_per_arrival($backend) }
            #[test] fn oneshot() { oneshot_reports_once_until_rearmed($backend) }
            #[test] fn writable() { writable_fires_with_send_space($backend) }
            #[test] fn peer_close() { peer_close_is_reported($backend) }
            #[test] fn delete() { delete_stops_reports($backend) }
            #[test] fn timeout() { wait_honours_timeout($backend) }
            #[test] fn waker() { waker_wakes_blocked_wait($backend) }
            #[test] fn errors() { error_cases($backend) }
            #[test] fn one_syscall_per_wait() { wait_syscalls($backend) }
        }
    )+};
}

for_each_backend! {
    select => Backend::Select,
    poll => Backend::Poll,
    epoll => Backend::Epoll,
    uring => Backend::Uring,
    uring_sqpoll => Backend::UringSqpoll,
}

#[test]
fn uring_empty_wait_without_timeout_makes_no_syscall() {
    let mut p = open(Backend::Uring);
    let mut events = Events::with_capacity(4);
    p.wait(&mut events, Some(Duration::ZERO)).unwrap();
    let before = iomux::syscalls::counts();
    for _ in 0..100 {
        assert_eq!(p.wait(&mut events, Some(Duration::ZERO)).unwrap(), 0);
    }
    assert_eq!(iomux::syscalls::counts().since(&before).total(), 0);
}

#[test]
fn select_refuses_fd_numbers_beyond_fd_setsize() {
    raise_nofile_limit();
    let (a, mut b) = pair();
    let mut p = open(Backend::Select);
    // Duplicate until the descriptor numbers pass 1024.
    let mut dups = Vec::new();
    let refused = loop {
        let d = a.try_clone().unwrap();
        let fd = d.as_raw_fd();
        dups.push(d);
        match p.add(fd, Token(fd as usize), Interest::READABLE, Mode::Level) {
            Ok(()) => assert!(fd < 1024, "select accepted fd {fd}"),
            Err(e) => break (fd, e),
        }
    };
    let (fd, err) = refused;
    assert!(fd >= 1024, "refused fd {fd}: {err}");
    assert!(matches!(err, Error::FdSetSize { .. }), "{err:?}");
    assert!(err.to_string().contains("FD_SETSIZE (1024)"), "{err}");
    // What was accepted still works: the dups share one readable socket.
    let mut events = Events::with_capacity(2048);
    b.write_all(b"x").unwrap();
    let n = p.wait(&mut events, Some(SOON)).unwrap();
    assert!(n > 900, "{n} of the registered dups reported");
}

#[test]
fn backend_names_parse_and_unknown_names_are_listed() {
    for (&b, &name) in Backend::ALL.iter().zip(Backend::NAMES) {
        assert_eq!(name.parse::<Backend>().unwrap(), b);
        assert_eq!(b.to_string(), name);
    }
    assert_eq!(Backend::EpollEt.mode(), Mode::Edge);
    assert_eq!(Backend::Epoll.mode(), Mode::Level);
    let err = "kqueue".parse::<Backend>().unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("kqueue") && msg.contains("select, poll, epoll, epoll-et, uring, uring-sqpoll"), "{msg}");
}

#[test]
fn iomux_backend_env_var_picks_the_default() {
    // The only test that touches this variable.
    std::env::set_var(Backend::ENV, "epoll-et");
    assert_eq!(Backend::from_env().unwrap(), Backend::EpollEt);
    std::env::set_var(Backend::ENV, "nope");
    assert!(matches!(Backend::from_env(), Err(Error::UnknownBackend { .. })));
    std::env::remove_var(Backend::ENV);
    assert_eq!(Backend::from_env().unwrap(), Backend::Epoll);
}

#[test]
fn syscall_counters_are_per_thread() {
    let before = iomux::syscalls::counts();
    std::thread::spawn(|| {
        let mut p = open(Backend::Epoll);
        let mut events = Events::with_capacity(4);
        for _ in 0..10 {
            p.wait(&mut events, Some(Duration::ZERO)).unwrap();
        }
        assert_eq!(iomux::syscalls::counts().get(Syscall::EpollPwait), 10);
    })
    .join()
    .unwrap();
    assert_eq!(iomux::syscalls::counts().since(&before).get(Syscall::EpollPwait), 0);
}

/// Soft RLIMIT_NOFILE up to the hard limit (select needs fds past 1024).
fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    lim.current = lim.maximum;
    setrlimit(Resource::Nofile, lim).expect("raise RLIMIT_NOFILE");
}
