//! Messages to a loop from other loops or any thread: a queue per loop,
//! delivered through the loop's waker to [`Handler::on_message`](super::Handler::on_message),
//! optionally bounded ([`ConfigBuilder::inbox_capacity`](super::ConfigBuilder::inbox_capacity)):
//! [`Sender::try_send`] refuses past it, and a producer loop that asked
//! ([`Io::when_room`](super::Io::when_room)) hears when room returns.

use crate::error::{Error, Result};
use crate::poller::Waker;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A loop's queue of messages. The waker lives under the same lock as the
/// queue, so a message sent before the loop set up its waker is found by
/// the loop's first look, and one sent after wakes it.
pub(crate) struct Inbox<M> {
    state: Mutex<InboxState<M>>,
    /// Messages `try_send` takes no more past (`send` still queues).
    capacity: Option<usize>,
    /// `try_send`s refused because the inbox was full.
    refused: AtomicU64,
}

struct InboxState<M> {
    queue: VecDeque<M>,
    waker: Option<Waker>,
    /// The loop has ended: sends fail, handing the message back.
    closed: bool,
    /// The deepest the queue has been.
    peak: usize,
    /// Loops waiting for room ([`Io::when_room`](super::Io::when_room)),
    /// told the next time this loop takes its messages.
    /// With the index of this inbox's loop, which they wait on.
    waiting: Vec<(Arc<RoomSignal>, usize)>,
}

impl<M> Inbox<M> {
    pub(crate) fn new(capacity: Option<usize>) -> Arc<Inbox<M>> {
        let state = InboxState { queue: VecDeque::new(), waker: None, closed: false, peak: 0, waiting: Vec::new() };
        Arc::new(Inbox { state: Mutex::new(state), capacity, refused: AtomicU64::new(0) })
    }

    /// The deepest the queue has been, and the `try_send`s it refused.
    pub(crate) fn figures(&self) -> (u64, u64) {
        (self.lock().peak as u64, self.refused.load(Ordering::Relaxed))
    }

    /// The state, even after a panic elsewhere held the lock: the queue
    /// is consistent after every operation on it.
    fn lock(&self) -> MutexGuard<'_, InboxState<M>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The loop's waker is ready: later sends wake the loop.
    pub(crate) fn set_waker(&self, waker: Waker) {
        self.lock().waker = Some(waker);
    }

    /// Every message queued so far, oldest first (those sent while the
    /// loop handles them wait for the next wake).
    pub(crate) fn take_all(&self) -> VecDeque<M> {
        let (taken, waiting) = {
            let mut state = self.lock();
            (std::mem::take(&mut state.queue), std::mem::take(&mut state.waiting))
        };
        // Room now: the producers that waited for it hear so (each wakes
        // its own loop, outside this lock).
        for (signal, loop_index) in waiting {
            signal.notify(loop_index);
        }
        taken
    }

    /// Tells `signal` that loop `loop_index` (this inbox's) has room: at
    /// once if it has some now (or has ended), else when it next takes its
    /// messages.
    fn wait_for_room(&self, signal: &Arc<RoomSignal>, loop_index: usize) {
        let mut state = self.lock();
        if state.closed || self.capacity.is_none_or(|cap| state.queue.len() < cap) {
            drop(state);
            return signal.notify(loop_index);
        }
        if !state.waiting.iter().any(|(s, _)| Arc::ptr_eq(s, signal)) {
            state.waiting.push((signal.clone(), loop_index));
        }
    }

    /// Messages taken but not handled (the loop held its messages): they
    /// go back to the front, before any sent since.
    pub(crate) fn put_back(&self, mut rest: VecDeque<M>) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        rest.append(&mut state.queue);
        state.queue = rest;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().queue.is_empty()
    }

    /// The loop ended: messages still queued are dropped, later sends fail.
    pub(crate) fn close(&self) {
        let waiting = {
            let mut state = self.lock();
            state.closed = true;
            state.waker = None;
            state.queue.clear();
            std::mem::take(&mut state.waiting)
        };
        // Those waiting for room hear now: try_send then says Ended.
        for (signal, loop_index) in waiting {
            signal.notify(loop_index);
        }
    }
}

/// One loop's notices that an inbox it waited on has room
/// ([`Io::when_room`](super::Io::when_room)): the indexes of those loops,
/// and the waker of the loop to tell.
pub(crate) struct RoomSignal {
    ready: Mutex<Vec<usize>>,
    waker: Waker,
}

impl RoomSignal {
    pub(crate) fn new(waker: Waker) -> Arc<RoomSignal> {
        Arc::new(RoomSignal { ready: Mutex::new(Vec::new()), waker })
    }

    fn notify(&self, loop_index: usize) {
        {
            let mut ready = self.ready.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if ready.contains(&loop_index) {
                return; // told already, and woken
            }
            ready.push(loop_index);
        }
        // Only an eventfd at its maximum count fails, and then a wake is pending.
        let _ = self.waker.wake();
    }

    /// The loops that have room since the last call, in the order told.
    pub(crate) fn take(&self) -> Vec<usize> {
        std::mem::take(&mut *self.ready.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

/// Why [`Sender::try_send`] did not queue a message; it hands it back.
pub enum TrySendError<M> {
    /// The inbox holds its capacity
    /// ([`ConfigBuilder::inbox_capacity`](super::ConfigBuilder::inbox_capacity)).
    Full(M),
    /// The loop has ended.
    Ended(M),
}

impl<M> TrySendError<M> {
    /// The message that was not sent.
    pub fn into_inner(self) -> M {
        match self {
            TrySendError::Full(m) | TrySendError::Ended(m) => m,
        }
    }
}

impl<M> fmt::Debug for TrySendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "Full(..)",
            TrySendError::Ended(_) => "Ended(..)",
        })
    }
}

impl<M> fmt::Display for TrySendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrySendError::Full(_) => "the loop's inbox is full",
            TrySendError::Ended(_) => "the loop has ended",
        })
    }
}

impl<M> std::error::Error for TrySendError<M> {}

/// Sends messages to one loop, from any thread (another loop's handler,
/// a worker, `main`); the loop hands each to
/// [`Handler::on_message`](super::Handler::on_message), in the order sent.
/// Cheap to clone. Made by [`Runtime::senders`](super::Runtime::senders).
///
/// ```
/// use iomux::runtime::{Config, Runtime};
///
/// let runtime = Runtime::new(Config::default(), 2)?;
/// let senders = runtime.senders::<String>()?;
/// assert_eq!(senders.iter().map(|s| s.loop_index()).collect::<Vec<_>>(), [0, 1]);
/// // Queued until loop 1 runs (a handler with `type Message = String` gets it).
/// senders[1].send("hello".to_string()).expect("loop 1 has not ended");
/// # Ok::<(), iomux::Error>(())
/// ```
pub struct Sender<M> {
    inbox: Arc<Inbox<M>>,
    loop_index: usize,
}

impl<M> Sender<M> {
    pub(crate) fn new(inbox: Arc<Inbox<M>>, loop_index: usize) -> Sender<M> {
        Sender { inbox, loop_index }
    }

    /// Queues `msg` for the loop and wakes it if it was not already due to
    /// wake. Never blocks on the loop (only on the queue's lock, held
    /// briefly). Fails with [`Error::LoopEnded`] once the loop has ended
    /// (`msg` is dropped); a message queued just before it ended is
    /// dropped unhandled.
    ///
    /// It queues past the inbox's capacity, if it has one: for a message
    /// that must not be refused; [`Sender::try_send`] keeps to it.
    pub fn send(&self, msg: M) -> Result<()> {
        self.push(msg, false).map_err(|_| Error::LoopEnded { loop_index: self.loop_index })
    }

    /// Queues `msg` as [`Sender::send`] does, unless the inbox holds its
    /// capacity ([`ConfigBuilder::inbox_capacity`](super::ConfigBuilder::inbox_capacity);
    /// without one it never is full): then it hands `msg` back, and a
    /// producer on a loop asks [`Io::when_room`](super::Io::when_room) to
    /// hear when to try again, pausing its own input meanwhile.
    ///
    /// ```
    /// use iomux::runtime::{Config, Runtime, TrySendError};
    ///
    /// let config = Config::builder().inbox_capacity(Some(2)).build()?;
    /// let runtime = Runtime::new(config, 1)?;
    /// let senders = runtime.senders::<u32>()?;
    /// assert!(senders[0].try_send(1).is_ok() && senders[0].try_send(2).is_ok());
    /// // The loop has not run yet: its inbox holds its capacity.
    /// assert!(matches!(senders[0].try_send(3), Err(TrySendError::Full(3))));
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn try_send(&self, msg: M) -> std::result::Result<(), TrySendError<M>> {
        self.push(msg, true)
    }

    /// Sends a clone of `msg` to each loop of `senders` that is still
    /// running (with [`Sender::send`]); returns how many got it. With
    /// `M` an `Arc` (or [`Bytes`](super::Bytes)), every loop shares the
    /// one value.
    ///
    /// ```
    /// use iomux::runtime::{Config, Runtime, Sender};
    /// use std::sync::Arc;
    ///
    /// let runtime = Runtime::new(Config::default(), 3)?;
    /// let senders = runtime.senders::<Arc<str>>()?;
    /// assert_eq!(Sender::broadcast(&senders, Arc::from("reload")), 3);
    /// # Ok::<(), iomux::Error>(())
    /// ```
    pub fn broadcast(senders: &[Sender<M>], msg: M) -> usize
    where
        M: Clone,
    {
        senders.iter().filter(|s| s.send(msg.clone()).is_ok()).count()
    }

    fn push(&self, msg: M, bounded: bool) -> std::result::Result<(), TrySendError<M>> {
        let waker = {
            let mut state = self.inbox.lock();
            if state.closed {
                return Err(TrySendError::Ended(msg));
            }
            if bounded && self.inbox.capacity.is_some_and(|cap| state.queue.len() >= cap) {
                self.inbox.refused.fetch_add(1, Ordering::Relaxed);
                return Err(TrySendError::Full(msg));
            }
            state.queue.push_back(msg);
            state.peak = state.peak.max(state.queue.len());
            // A non-empty queue already has a wake on its way.
            if state.queue.len() == 1 {
                state.waker.clone()
            } else {
                None
            }
        };
        if let Some(waker) = waker {
            // Only an eventfd at its maximum count fails, and then a wake
            // is pending anyway.
            let _ = waker.wake();
        }
        Ok(())
    }

    /// Asks for `signal` to be told when this loop's inbox has room.
    pub(crate) fn wait_for_room(&self, signal: &Arc<RoomSignal>) {
        self.inbox.wait_for_room(signal, self.loop_index);
    }

    /// The index of the loop this sends to (as `make_handler` received it).
    pub fn loop_index(&self) -> usize {
        self.loop_index
    }
}

impl<M> Clone for Sender<M> {
    fn clone(&self) -> Self {
        Sender { inbox: self.inbox.clone(), loop_index: self.loop_index }
    }
}

impl<M> fmt::Debug for Sender<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").field("loop_index", &self.loop_index).finish_non_exhaustive()
    }
}
