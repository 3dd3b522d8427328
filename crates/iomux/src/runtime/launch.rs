//! [`Runtime`]: N share-nothing loops on N threads (one loop: on the
//! calling thread), for a server (each loop with its own listener) or a
//! client (no listener), stopped together.

use super::core::Setup;
use super::messages::{Inbox, Sender};
use super::stats::LoopStats;
use super::{completion, readiness, Config, Control, Handler};
use crate::error::{Error, Result};
use crate::poller::Backend;
use crate::sys::{
    self,
    net::{self, Fd},
};
use crate::Syscall;
use std::any::Any;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{IntoRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Listen backlog: at least the kernel's usual somaxconn, so a burst of
/// connects waits in the queue instead of being dropped.
const BACKLOG: i32 = 4096;

/// Descriptors reserved in the process's table when no connection limit
/// says how many the loops will hold (8 bytes of kernel memory each: 512
/// KiB); beyond this the table grows as connections arrive.
const RESERVE_FDS_UNLIMITED: u64 = 1 << 16;

/// Sizes the descriptor table for every connection the loops may hold,
/// now, before the loop threads exist: growing it later, with threads,
/// stalls the loop that opens the descriptor for an RCU grace period.
/// Best effort: a failure only means the table grows as it would anyway.
fn reserve_descriptors(config: &Config, threads: usize) {
    let Some(limit) = sys::nofile_soft_limit() else { return };
    let wanted = match config.max_conns {
        Some(m) => (m as u64).saturating_mul(threads as u64).saturating_add(64),
        None => RESERVE_FDS_UNLIMITED,
    };
    let _ = sys::reserve_fd_table(wanted.min(limit));
}

/// Runs loops: `threads` of them, each on its own thread (a lone loop on
/// the calling thread) with its own handler, its own poller or ring and
/// (for a server) its own listener.
///
/// ```no_run
/// use iomux::runtime::{Config, ConnId, Handler, Io, Runtime};
///
/// struct Echo;
/// impl Handler for Echo {
///     type Conn = ();
///     type Message = ();
///     fn on_accept(&mut self, _: &mut Io<()>, _: ConnId) {}
///     fn on_data(&mut self, io: &mut Io<()>, conn: ConnId, _: &mut (), data: &[u8]) -> usize {
///         let _ = io.write(conn, data); // false only once the connection is closing
///         data.len()
///     }
/// }
///
/// let runtime = Runtime::new(Config::default(), 2)?
///     .bind("127.0.0.1:7878".parse().unwrap())?
///     .stop_on_signals();
/// let finished = runtime.run(|_loop_index| Echo)?;
/// println!("{} connections served", finished.stats.accepted);
/// # Ok::<(), iomux::Error>(())
/// ```
pub struct Runtime {
    config: Config,
    threads: usize,
    listeners: Vec<Fd>,
    /// The listeners are a Unix socket's.
    unix: bool,
    local_addr: Option<SocketAddr>,
    reuse_port: bool,
    control: Control,
    signals: bool,
    on_ready: Option<Box<dyn FnOnce() + Send>>,
    /// The loops' inboxes, once [`Runtime::senders`] made them: a
    /// `Vec<Arc<Inbox<M>>>` of the message type asked for.
    inboxes: OnceLock<Inboxes>,
}

/// Inboxes of some message type, and that type's name for the error when
/// the handler takes another.
struct Inboxes {
    loops: Box<dyn Any + Send + Sync>,
    type_name: &'static str,
}

/// What a run of loops leaves: each loop's handler and figures, and the
/// figures of all loops together.
pub struct Finished<H> {
    /// The handlers, in loop order.
    pub handlers: Vec<H>,
    /// Each loop's figures, in loop order.
    pub loops: Vec<LoopStats>,
    /// Every loop's figures merged.
    pub stats: LoopStats,
}

impl Runtime {
    /// `threads` loops (at least 1) with `config`; no listener yet.
    pub fn new(config: Config, threads: usize) -> Result<Runtime> {
        if threads == 0 {
            return Err(Error::InvalidConfig { field: "threads", reason: "must be at least 1 loop".into() });
        }
        Ok(Runtime {
            config,
            threads,
            listeners: Vec::new(),
            unix: false,
            local_addr: None,
            reuse_port: false,
            control: Control::new(),
            signals: false,
            on_ready: None,
            inboxes: OnceLock::new(),
        })
    }

    /// Makes [`Runtime::bind`] set SO_REUSEPORT even with one loop, so
    /// that several processes (or runtimes) may listen on the same
    /// address, the kernel spreading connections over them: call it
    /// before `bind`. Off by default because sharing hides a mistake: a
    /// second server on a taken port would quietly join the first one
    /// instead of failing with "address in use". Only sockets that also
    /// set SO_REUSEPORT, owned by the same user, can share the address.
    pub fn reuse_port(mut self) -> Runtime {
        self.reuse_port = true;
        self
    }

    /// Listens on `addr`: one listener per loop, sharing the address with
    /// SO_REUSEPORT when there are several (the kernel spreads connections
    /// over them) or when [`Runtime::reuse_port`] asked for it. Port 0
    /// picks a free port: see [`Runtime::local_addr`].
    pub fn bind(mut self, addr: SocketAddr) -> Result<Runtime> {
        let reuse_port = self.reuse_port || self.threads > 1;
        let bind_err = |addr, source| Error::Bind { addr, source };
        // Keepalive and the user timeout before listen: every accepted
        // connection inherits them.
        let liveness = self.config.liveness();
        let first = net::tcp_listener(&addr, reuse_port, BACKLOG, liveness).map_err(|e| bind_err(addr, e))?;
        let local = net::local_addr(first.raw())
            .map_err(|e| Error::sys("listen", Syscall::Getsockname, Some(first.raw()), e))?;
        self.listeners = vec![first];
        self.unix = false;
        for _ in 1..self.threads {
            self.listeners.push(net::tcp_listener(&local, true, BACKLOG, liveness).map_err(|e| bind_err(local, e))?);
        }
        self.local_addr = Some(local);
        Ok(self)
    }

    /// Serves connections from a listener made elsewhere (every loop
    /// accepts from it). It is made non-blocking; TCP_NODELAY and
    /// SO_OOBINLINE (and the keepalive and user timeout the config asks
    /// for) are set on it, so accepted connections inherit them.
    pub fn listener(mut self, listener: TcpListener) -> Result<Runtime> {
        let sys_err = |syscall, e| Error::sys("listen", syscall, None, e);
        listener.set_nonblocking(true).map_err(|e| sys_err(Syscall::Fcntl, e))?;
        let local = listener.local_addr().map_err(|e| sys_err(Syscall::Getsockname, e))?;
        let mut fds = Vec::with_capacity(self.threads);
        for _ in 1..self.threads {
            let dup = listener.try_clone().map_err(|e| sys_err(Syscall::Fcntl, e))?;
            fds.push(adopt(dup));
        }
        fds.push(adopt(listener));
        for fd in &fds {
            let setsockopt = |e| Error::sys("listen", Syscall::Setsockopt, Some(fd.raw()), e);
            net::set_nodelay(fd.raw()).map_err(setsockopt)?;
            net::set_oob_inline(fd.raw()).map_err(setsockopt)?;
            self.config.apply_liveness(fd.raw()).map_err(setsockopt)?;
        }
        self.listeners = fds;
        self.unix = false;
        self.local_addr = Some(local);
        Ok(self)
    }

    /// Listens on the Unix stream socket `path`, every loop accepting from
    /// the one listener (a Unix socket has no SO_REUSEPORT spreading).
    /// The path must not exist yet: a socket file left by a server that
    /// died is the caller's to remove (it may be another server's, alive).
    /// Accepted connections are served as TCP ones are, behind the same
    /// [`Handler`], but for what TCP alone has (no TCP_NODELAY, no
    /// keepalive, and [`Io::peer_addr`](super::Io::peer_addr) is an error).
    ///
    /// ```
    /// use iomux::runtime::{Config, Runtime};
    ///
    /// let dir = std::env::temp_dir().join(format!("iomux-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).expect("a temporary folder");
    /// let path = dir.join("echo.sock");
    /// let runtime = Runtime::new(Config::default(), 2)?.bind_unix(&path)?;
    /// assert!(path.exists());
    /// # drop(runtime);
    /// # std::fs::remove_dir_all(&dir).expect("removed");
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn bind_unix(self, path: impl AsRef<Path>) -> Result<Runtime> {
        let path = path.as_ref();
        let listener =
            net::unix_listener(path, BACKLOG).map_err(|source| Error::BindUnix { path: path.into(), source })?;
        self.share_listener(listener)
    }

    /// Serves connections from a Unix listener made elsewhere (every loop
    /// accepts from it); it is made non-blocking.
    pub fn unix_listener(self, listener: UnixListener) -> Result<Runtime> {
        listener.set_nonblocking(true).map_err(|e| Error::sys("listen", Syscall::Fcntl, None, e))?;
        self.share_listener(Fd::adopt_new(OwnedFd::from(listener).into_raw_fd()))
    }

    /// Every loop accepts from `listener` (a duplicate each).
    fn share_listener(mut self, listener: Fd) -> Result<Runtime> {
        let mut fds = Vec::with_capacity(self.threads);
        for _ in 1..self.threads {
            let dup =
                net::dup(listener.raw()).map_err(|e| Error::sys("listen", Syscall::Fcntl, Some(listener.raw()), e))?;
            fds.push(dup);
        }
        fds.push(listener);
        self.listeners = fds;
        self.unix = true;
        self.local_addr = None;
        Ok(self)
    }

    /// The address the loops listen on, once bound (None for a Unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// A handle that stops the loops from another thread.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Uses `control` (shared with other code) instead of a new one, so
    /// that stopping it stops these loops.
    pub fn controlled_by(mut self, control: Control) -> Runtime {
        self.control = control;
        self
    }

    /// Stops the loops gracefully on SIGINT or SIGTERM (while they run); a
    /// second signal ends the process as the signal's default would.
    pub fn stop_on_signals(mut self) -> Runtime {
        self.signals = true;
        self
    }

    /// Calls `ready` once every loop is set up (poller or ring, buffers,
    /// listener registered): from then on connections are served. It is
    /// not called when a set-up step fails.
    pub fn on_ready(mut self, ready: impl FnOnce() + Send + 'static) -> Runtime {
        self.on_ready = Some(Box::new(ready));
        self
    }

    /// One [`Sender`] per loop, in loop order, for messages of type `M`
    /// (the handler's [`Handler::Message`]): hand them to the handlers
    /// through `make_handler`, or keep them to talk to the loops from any
    /// thread. Every call returns senders to the same loops. Messages sent
    /// before the loops start are delivered once they do.
    ///
    /// Fails when called before with another type; [`Runtime::run`] fails
    /// when `M` is not the handler's message type.
    ///
    /// ```
    /// use iomux::runtime::{Config, ConnId, Handler, Io, Runtime};
    ///
    /// /// Counts the messages it gets; a `0` stops every loop.
    /// struct Counter(u64);
    ///
    /// impl Handler for Counter {
    ///     type Conn = ();
    ///     type Message = u64;
    ///     fn on_accept(&mut self, _: &mut Io<()>, _: ConnId) {}
    ///     fn on_data(&mut self, _: &mut Io<()>, _: ConnId, _: &mut (), data: &[u8]) -> usize {
    ///         data.len()
    ///     }
    ///     fn on_message(&mut self, io: &mut Io<()>, msg: u64) {
    ///         self.0 += 1;
    ///         if msg == 0 {
    ///             io.stop();
    ///         }
    ///     }
    /// }
    ///
    /// let runtime = Runtime::new(Config::default(), 2)?.bind("127.0.0.1:0".parse().unwrap())?;
    /// let senders = runtime.senders::<u64>()?;
    /// std::thread::spawn(move || {
    ///     for n in [3, 2, 1, 0] {
    ///         senders[1].send(n).expect("loop 1 runs until it gets 0");
    ///     }
    ///     senders[0].send(0).expect("loop 0 runs until it gets 0");
    /// });
    /// let finished = runtime.run(|_| Counter(0))?;
    /// assert_eq!(finished.handlers[0].0, 1);
    /// assert_eq!(finished.handlers[1].0, 4);
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn senders<M: Send + 'static>(&self) -> Result<Vec<Sender<M>>> {
        let inboxes = self.inboxes.get_or_init(|| Inboxes {
            loops: Box::new((0..self.threads).map(|_| Inbox::<M>::new(self.config.inbox_capacity)).collect::<Vec<_>>()),
            type_name: std::any::type_name::<M>(),
        });
        let loops = inboxes.loops.downcast_ref::<Vec<Arc<Inbox<M>>>>().ok_or_else(|| Error::InvalidConfig {
            field: "senders",
            reason: format!(
                "senders were made for messages of type {}, not {}",
                inboxes.type_name,
                std::any::type_name::<M>()
            ),
        })?;
        Ok(loops.iter().enumerate().map(|(i, inbox)| Sender::new(inbox.clone(), i)).collect())
    }

    /// Runs the loops until they stop: a server until [`Control::stop`]
    /// (or a signal), a client until its handlers have nothing left to do.
    /// `make_handler(i)` builds loop `i`'s handler on that loop's thread
    /// (so it may pin the thread, for instance). One loop runs on the
    /// calling thread, and signals are handled without a thread, so a
    /// one-loop server on a readiness backend is a one-thread process
    /// (the kernel then takes no file reference per syscall; io_uring
    /// adds kernel threads of its own). So with one loop, the loop's
    /// syscalls count in the caller's thread's [`crate::syscalls`]
    /// counters, and any change to the thread's CPU affinity during `run`
    /// (a pin in `make_handler`, say) is undone when it returns, as it
    /// would end with a loop's own thread. More loops run on threads of their
    /// own, named `iomux-loop-N`. One loop failing stops the others; the
    /// first error is returned.
    ///
    /// Before the loops start, the process's descriptor table is grown to
    /// hold `max_conns` x threads connections (65,536 without a limit, and
    /// never beyond RLIMIT_NOFILE): growing it later, once the process has
    /// threads, stalls the loop that opens the descriptor for an RCU grace
    /// period (8-23 ms each time here), long enough for a burst of
    /// connects to overflow the listen queue.
    pub fn run<H, F>(self, make_handler: F) -> Result<Finished<H>>
    where
        H: Handler + Send,
        F: Fn(usize) -> H + Sync,
    {
        self.run_keeping(make_handler, |handler| handler)
    }

    /// As [`Runtime::run`], for a handler that is not `Send` (it holds an
    /// `Rc`, say): each is built, used and dropped on its own loop's
    /// thread, so [`Finished::handlers`] holds one `()` per loop.
    ///
    /// ```
    /// use iomux::runtime::{Config, ConnId, Handler, Io, Runtime};
    /// use std::rc::Rc;
    ///
    /// struct Shared(Rc<Vec<u8>>); // Rc: not Send
    ///
    /// impl Handler for Shared {
    ///     type Conn = ();
    ///     type Message = ();
    ///     fn on_accept(&mut self, io: &mut Io<()>, conn: ConnId) {
    ///         let _ = io.write(conn, &self.0);
    ///     }
    ///     fn on_data(&mut self, _io: &mut Io<()>, _conn: ConnId, _: &mut (), data: &[u8]) -> usize {
    ///         data.len()
    ///     }
    /// }
    ///
    /// let runtime = Runtime::new(Config::builder().build()?, 1)?;
    /// runtime.control().stop(); // stops at once: this example serves nobody
    /// let finished = runtime.run_local(|_| Shared(Rc::new(b"hello\n".to_vec())))?;
    /// assert_eq!(finished.handlers.len(), 1);
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn run_local<H, F>(self, make_handler: F) -> Result<Finished<()>>
    where
        H: Handler,
        F: Fn(usize) -> H + Sync,
    {
        self.run_keeping(make_handler, drop)
    }

    /// Runs the loops; `keep` turns each loop's handler, on its thread,
    /// into what `Finished` hands back.
    fn run_keeping<H, F, T>(self, make_handler: F, keep: fn(H) -> T) -> Result<Finished<T>>
    where
        H: Handler,
        F: Fn(usize) -> H + Sync,
        T: Send,
    {
        let Runtime { config, threads, listeners, unix, control, signals, on_ready, inboxes, .. } = self;
        let mut inboxes = match inboxes.into_inner() {
            None => vec![None; threads],
            Some(Inboxes { loops, type_name }) => match loops.downcast::<Vec<Arc<Inbox<H::Message>>>>() {
                Ok(loops) => loops.into_iter().map(Some).collect(),
                Err(_) => {
                    return Err(Error::InvalidConfig {
                        field: "senders",
                        reason: format!(
                            "senders were made for messages of type {type_name}, but the handler's Message is {}",
                            std::any::type_name::<H::Message>()
                        ),
                    })
                }
            },
        }
        .into_iter();
        reserve_descriptors(&config, threads);
        let signal_handlers = if signals { Some(SignalHandlers::register(&control, threads)?) } else { None };
        let ready = Ready { remaining: AtomicUsize::new(threads), callback: Mutex::new(on_ready) };
        let mut listeners = listeners.into_iter();
        let (make_handler, config, control, ready) = (&make_handler, &config, &control, &ready);
        let run_loop = |i: usize, listener: Option<Fd>, inbox: Option<Arc<Inbox<H::Message>>>| {
            // A panic here (handler, on_ready) stops the other loops too.
            let _stop_on_panic = StopOnPanic(control);
            // However the loop ends, later sends fail instead of queueing for nobody.
            let _close_inbox = inbox.clone().map(CloseOnDrop);
            let mut handler = make_handler(i);
            let signal_slot = signal_handlers.as_ref().map(|h| &h.target.wakers[i]);
            let setup =
                Setup { cfg: config, listener, unix, control, inbox, ready: &|| ready.one_ready(), signal_slot };
            let result = match config.backend {
                Backend::Uring | Backend::UringSqpoll => completion::run(setup, &mut handler),
                _ => readiness::run(setup, &mut handler),
            };
            if result.is_err() {
                control.stop(); // one loop failing stops the others too
            }
            result.map(|stats| (keep(handler), stats))
        };
        let results: Vec<Result<(T, LoopStats)>> = if threads == 1 {
            // One loop runs on the calling thread: with signals handled
            // in their handlers, the process then has one thread, and the
            // kernel takes no file reference per syscall (fdget's shortcut
            // for an unshared descriptor table).
            let (listener, inbox) = (listeners.next(), inboxes.next().flatten());
            let _affinity = sys::KeepAffinity::now();
            let run = std::panic::AssertUnwindSafe(|| run_loop(0, listener, inbox));
            vec![std::panic::catch_unwind(run).unwrap_or(Err(Error::LoopPanicked))]
        } else {
            std::thread::scope(|scope| {
                let mut handles = Vec::with_capacity(threads);
                for i in 0..threads {
                    let (listener, inbox) = (listeners.next(), inboxes.next().flatten());
                    let run_loop = &run_loop;
                    let spawned = std::thread::Builder::new()
                        .name(format!("iomux-loop-{i}"))
                        .spawn_scoped(scope, move || run_loop(i, listener, inbox));
                    if spawned.is_err() {
                        control.stop(); // the loops already running end too
                    }
                    handles.push(spawned.map_err(Error::Spawn));
                }
                handles.into_iter().map(|h| h?.join().unwrap_or(Err(Error::LoopPanicked))).collect()
            })
        };
        drop(signal_handlers);
        let mut finished = Finished { handlers: Vec::new(), loops: Vec::new(), stats: LoopStats::default() };
        for result in results {
            let (handler, stats) = result?;
            finished.stats.merge(&stats);
            finished.loops.push(stats);
            finished.handlers.push(handler);
        }
        Ok(finished)
    }
}

fn adopt(listener: TcpListener) -> Fd {
    Fd::adopt_new(OwnedFd::from(listener).into_raw_fd())
}

/// Stops every loop when dropped during a panic, so `run` returns.
struct StopOnPanic<'a>(&'a Control);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop();
        }
    }
}

/// Closes a loop's inbox when the loop's thread leaves its work.
struct CloseOnDrop<M>(Arc<Inbox<M>>);

impl<M> Drop for CloseOnDrop<M> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Counts loops that finished setting up; the last one calls back.
struct Ready {
    remaining: AtomicUsize,
    callback: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Ready {
    fn one_ready(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(callback) = self.callback.lock().ok().and_then(|mut c| c.take()) {
                callback();
            }
        }
    }
}

/// SIGINT/SIGTERM's handlers for one runtime: each sets the runtime's
/// stop flag and wakes its loops ([`Control::stop`]'s work, done without
/// a lock or a thread); unregistered when the loops end.
struct SignalHandlers {
    target: Arc<sys::SignalTarget>,
    ids: Vec<signal_hook::SigId>,
}

/// Whether SIGINT/SIGTERM act as by default (end the process): true while
/// no runtime handles them. Once signal-hook's handler is installed it
/// stays, and with nothing registered it would ignore them; this keeps
/// their default meaning for a program that goes on after `run`.
fn default_when_unhandled() -> Result<&'static (Arc<AtomicBool>, AtomicUsize)> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    static STATE: OnceLock<(Arc<AtomicBool>, AtomicUsize)> = OnceLock::new();
    if let Some(state) = STATE.get() {
        return Ok(state);
    }
    let flag = Arc::new(AtomicBool::new(true));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_default(signal, flag.clone())
            .map_err(|e| Error::sys("signals", Syscall::RtSigaction, None, e))?;
    }
    Ok(STATE.get_or_init(|| (flag, AtomicUsize::new(0))))
}

impl SignalHandlers {
    fn register(control: &Control, loops: usize) -> Result<SignalHandlers> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let (unhandled, handling) = default_when_unhandled()?;
        handling.fetch_add(1, Ordering::SeqCst);
        unhandled.store(false, Ordering::SeqCst);
        let target = Arc::new(sys::SignalTarget::new(control.stop_flag(), loops));
        // Dropped on failure: what was registered goes, and the count too.
        let mut handlers = SignalHandlers { target, ids: Vec::with_capacity(2) };
        for signal in [SIGINT, SIGTERM] {
            let id = sys::stop_on_signal(signal, handlers.target.clone())
                .map_err(|e| Error::sys("signals", Syscall::RtSigaction, None, e))?;
            handlers.ids.push(id);
        }
        Ok(handlers)
    }
}

impl Drop for SignalHandlers {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        if let Ok((unhandled, handling)) = default_when_unhandled() {
            if handling.fetch_sub(1, Ordering::SeqCst) == 1 {
                unhandled.store(true, Ordering::SeqCst);
            }
        }
    }
}
